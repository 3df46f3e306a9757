"""fdatasync of appended groups on this disk: a growing file, one zero-filled ahead, one extended sparse (ftruncate
ahead, as Java's JournalChannel writes a few zero bytes at the end of each preallocation), one fallocate'd."""
import os, time, resource
def run(mode, group, total=256 << 20, path="/tmp/s35/sync.dat"):
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
    if mode == "zeros":
        z = bytes(4 << 20)
        for _ in range(total // len(z) + 1): os.write(fd, z)
        os.fsync(fd); os.lseek(fd, 0, 0)
    elif mode == "sparse":
        os.ftruncate(fd, total + (4 << 20)); os.fsync(fd)
    elif mode == "fallocate":
        os.posix_fallocate(fd, 0, total + (4 << 20)); os.fsync(fd)
    data = os.urandom(group)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(total // group):
        os.write(fd, data); os.fdatasync(fd)
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    os.close(fd); os.unlink(path)
    mb = total / 1e6
    return (t1 - t0) / mb * 1e3, (r1.ru_stime - r0.ru_stime + r1.ru_utime - r0.ru_utime) / mb * 1e3
for group in (160 << 10, 1600 << 10):
    for rep in range(2):
        for mode in ("append", "zeros", "sparse", "fallocate"):
            wall, cpu = run(mode, group)
            print(f"group {group>>10} KiB {mode:9s}: wall {wall:.2f} ms/MB, cpu {cpu:.3f} ms/MB")
