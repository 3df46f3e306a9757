"""Finding Java and building JVM command lines (small heaps, fast start)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bkspark.devcluster.process import LocalClusterError

__all__ = ["JVM_OPTS", "java_executable"]

# Small, quick-starting JVMs: the test machines are shared and have few cores.
JVM_OPTS: tuple[str, ...] = (
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Xss512k",
    "-Djava.net.preferIPv4Stack=true",
    # JVM warnings (CDS, GC ...) to stderr: stdout of the shell and of tools/java programs is their output.
    "-Xlog:disable",
    "-Xlog:all=warning:stderr",
    "-Dio.netty.leakDetection.level=disabled",
    "-Dio.netty.tryReflectionSetAccessible=true",
    # What Apache BookKeeper's bin/common.sh adds on Java 9+ (page cache hints, CRC32C, netty direct buffers).
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
)



def java_executable() -> str:
    """Path of `java` ($JAVA_HOME/bin/java, else on PATH); LocalClusterError if there is none."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise LocalClusterError(
            "bkspark harness: Java 17+ is needed to run ZooKeeper and Apache BookKeeper, and `java` is not on PATH "
            "(install it with `apt-get install openjdk-17-jdk-headless`, or set JAVA_HOME; `make java` checks it)"
        )
    return found
