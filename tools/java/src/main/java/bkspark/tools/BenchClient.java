package bkspark.tools;

import java.io.File;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerEntries;
import org.apache.bookkeeper.client.api.LedgerEntry;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * Throughput benchmark over Apache BookKeeper's Java client, the Java side of bench/ (see BENCHMARKS.md). Each
 * command prints one JSON object on stdout (key "event"); log lines go elsewhere. Exit status 0 done, 1 error,
 * 3 the operation does not exist in this BookKeeper version (batch reads before 4.17).
 *
 * <pre>
 * write --zk URI [--ensemble 1 --write 1 --ack 1] [--digest CRC32C] [--password P] --entries N [--size 1024]
 *       [--outstanding 1000] [--warmup 0] [--v2 true]
 *     Creates a ledger and adds N entries of S bytes with up to P adds outstanding (asyncAddEntry, as
 *     bookkeeper-benchmark's BenchThroughputLatency does), then closes it. --warmup W first writes W entries to a
 *     separate ledger (not timed, deleted afterwards) so the JIT has compiled the add path.
 *     Prints entries/s, MB/s (10^6 bytes of payload) and add latency percentiles (ms).
 * read --zk URI --ledger L [--digest CRC32C] [--password P] [--mode batch|single] [--batch-size 100]
 *      [--max-size 1048576] [--outstanding 1] [--passes 1] [--warmup-passes 1] [--v2 true]
 *     Reads entries 0..LAC of a closed ledger (openLedgerNoRecovery). mode batch: LedgerHandle.batchReadAsync
 *     (BP-62, 4.17+, through reflection) of batch-size entries; mode single: readAsync(first, first+batch-size-1),
 *     which sends one read request per entry, pipelined, as a user of the range API gets it. Up to
 *     --outstanding requests (batches or ranges) in flight. Untimed warm-up passes first, then timed passes;
 *     the figures cover the timed passes. Prints entries/s, MB/s and per-request latency percentiles (ms).
 * </pre>
 *
 * <p>--zk takes a metadata service URI; without it the system property bkspark.metadataServiceUri or the
 * environment variable BKSPARK_METADATA_SERVICE_URI is used. A client configuration file named by the system
 * property bkspark.clientConf is loaded first when there is one. Batch reads need the v2 wire protocol, so
 * --v2 defaults to true (Pulsar's setting too).
 */
public final class BenchClient {
    private BenchClient() {
    }

    static final class Args {
        final Map<String, String> values = new HashMap<>();

        Args(String[] argv, int from) {
            for (int i = from; i < argv.length; i++) {
                String key = argv[i];
                if (!key.startsWith("--") || i + 1 >= argv.length) {
                    throw new IllegalArgumentException("expected --option value pairs, got " + key);
                }
                values.put(key.substring(2), argv[++i]);
            }
        }

        String get(String name, String dflt) {
            String v = values.get(name);
            if (v == null && dflt == null) {
                throw new IllegalArgumentException("missing --" + name);
            }
            return v == null ? dflt : v;
        }

        long getLong(String name, Long dflt) {
            String v = values.get(name);
            if (v == null) {
                if (dflt == null) {
                    throw new IllegalArgumentException("missing --" + name);
                }
                return dflt;
            }
            return Long.parseLong(v);
        }

        int getInt(String name, Integer dflt) {
            return (int) getLong(name, dflt == null ? null : (long) dflt);
        }

        boolean getBool(String name, boolean dflt) {
            String v = values.get(name);
            if (v == null) {
                return dflt;
            }
            if (!v.equals("true") && !v.equals("false")) {
                throw new IllegalArgumentException("--" + name + " takes true or false, got " + v);
            }
            return Boolean.parseBoolean(v);
        }
    }

    static BookKeeper.DigestType digest(String name) {
        String n = name.trim().toUpperCase();
        return n.equals("HMAC") ? BookKeeper.DigestType.MAC : BookKeeper.DigestType.valueOf(n);
    }

    static String metadataServiceUri(Args a) {
        String uri = a.values.get("zk");
        if (uri == null) {
            uri = System.getProperty("bkspark.metadataServiceUri");
        }
        if (uri == null) {
            uri = System.getenv("BKSPARK_METADATA_SERVICE_URI");
        }
        if (uri == null) {
            throw new IllegalArgumentException("no metadata service URI: pass --zk zk+hierarchical://host:port/root");
        }
        return uri;
    }

    static BookKeeper connect(Args a) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        String confFile = System.getProperty("bkspark.clientConf");
        if (confFile != null && new File(confFile).isFile()) {
            conf.loadConf(new File(confFile).toURI().toURL());
        }
        conf.setMetadataServiceUri(metadataServiceUri(a));
        conf.setUseV2WireProtocol(a.getBool("v2", true));
        conf.setAddEntryTimeout(60);
        conf.setReadEntryTimeout(60);
        // "throttle" is a client-side rate limit in adds per second (default 5000): off, our window bounds adds.
        conf.setThrottleValue(0);
        if (Refl.hasMethod(ClientConfiguration.class, "setBatchReadEnabled")) {
            Refl.call(conf, "setBatchReadEnabled", Boolean.TRUE);
        }
        return new BookKeeper(conf);
    }

    static String bookkeeperVersion() {
        try {
            return VectorGen.bookkeeperVersion();
        } catch (Exception e) {
            return "unknown";
        }
    }

    /** Latency percentiles in milliseconds of a set of nanosecond samples. */
    static Map<String, Object> percentiles(long[] nanos, int n) {
        long[] s = Arrays.copyOf(nanos, n);
        Arrays.sort(s);
        Map<String, Object> m = new LinkedHashMap<>();
        if (n == 0) {
            return m;
        }
        double sum = 0;
        for (long v : s) {
            sum += v;
        }
        m.put("mean", ms(sum / n));
        for (double p : new double[] {50, 95, 99, 99.9}) {
            int idx = (int) Math.min(n - 1, Math.max(0, Math.ceil(p / 100.0 * n) - 1));
            m.put("p" + (p == Math.floor(p) ? String.valueOf((int) p) : String.valueOf(p)), ms(s[idx]));
        }
        m.put("max", ms(s[n - 1]));
        return m;
    }

    /** Milliseconds with 3 decimals, as a JSON number (Json has no floating point: printed as a long of us/1000). */
    static Object ms(double nanos) {
        return new Raw(String.format(java.util.Locale.ROOT, "%.3f", nanos / 1e6));
    }

    static Object num(double v) {
        return new Raw(String.format(java.util.Locale.ROOT, "%.3f", v));
    }

    /** A JSON number already formatted; Json.write only knows integers, so numbers go through a string. */
    static final class Raw {
        final String text;

        Raw(String text) {
            this.text = text;
        }
    }

    /** Json.write plus Raw numbers. */
    static String toJson(Map<String, Object> m) {
        Map<String, Object> copy = new LinkedHashMap<>();
        List<String> raws = new ArrayList<>();
        for (Map.Entry<String, Object> e : m.entrySet()) {
            copy.put(e.getKey(), replaceRaw(e.getValue(), raws));
        }
        String text = Json.write(copy);
        for (int i = 0; i < raws.size(); i++) {
            text = text.replace("\"@@raw" + i + "@@\"", raws.get(i));
        }
        return text;
    }

    @SuppressWarnings("unchecked")
    private static Object replaceRaw(Object v, List<String> raws) {
        if (v instanceof Raw) {
            raws.add(((Raw) v).text);
            return "@@raw" + (raws.size() - 1) + "@@";
        }
        if (v instanceof Map) {
            Map<String, Object> out = new LinkedHashMap<>();
            for (Map.Entry<String, Object> e : ((Map<String, Object>) v).entrySet()) {
                out.put(e.getKey(), replaceRaw(e.getValue(), raws));
            }
            return out;
        }
        return v;
    }

    static void print(Map<String, Object> m) {
        System.out.println(toJson(m));
        System.out.flush();
    }

    // ------------------------------------------------------------------ write

    /** Adds n entries with at most `outstanding` in flight; returns the per-add latencies (ns) and the time. */
    static long[] addAll(LedgerHandle lh, byte[] data, long n, int outstanding, long[] latencies) throws Exception {
        Semaphore window = new Semaphore(outstanding);
        CountDownLatch done = new CountDownLatch(1);
        AtomicLong completed = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        long start = System.nanoTime();
        for (long i = 0; i < n; i++) {
            window.acquire();
            if (failure.get() != null) {
                break;
            }
            final int idx = (int) i;
            final long sent = System.nanoTime();
            lh.asyncAddEntry(data, (rc, h, entryId, ctx) -> {
                if (latencies != null) {
                    latencies[idx] = System.nanoTime() - sent;
                }
                if (rc != 0) {
                    failure.compareAndSet(null, org.apache.bookkeeper.client.BKException.create(rc));
                }
                window.release();
                if (completed.incrementAndGet() == n) {
                    done.countDown();
                }
            }, null);
        }
        if (failure.get() == null && !done.await(600, TimeUnit.SECONDS)) {
            throw new IllegalStateException("adds did not complete in 600 s");
        }
        long elapsed = System.nanoTime() - start;
        if (failure.get() != null) {
            throw new IllegalStateException("an add failed: " + failure.get(), failure.get());
        }
        return new long[] {elapsed};
    }

    static void write(Args a) throws Exception {
        int ensemble = a.getInt("ensemble", 1);
        int writeQ = a.getInt("write", ensemble);
        int ackQ = a.getInt("ack", writeQ);
        BookKeeper.DigestType dt = digest(a.get("digest", "CRC32C"));
        byte[] password = a.get("password", "").getBytes(StandardCharsets.UTF_8);
        long entries = a.getLong("entries", null);
        int size = a.getInt("size", 1024);
        int outstanding = a.getInt("outstanding", 1000);
        long warmup = a.getLong("warmup", 0L);
        if (entries < 1 || entries > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("--entries must be in 1.." + Integer.MAX_VALUE);
        }
        byte[] data = new byte[size];
        for (int i = 0; i < size; i++) {
            data[i] = (byte) ('a' + i % 26);
        }
        try (BookKeeper bk = connect(a)) {
            if (warmup > 0) {
                LedgerHandle w = bk.createLedger(ensemble, writeQ, ackQ, dt, password);
                addAll(w, data, warmup, outstanding, null);
                w.close();
                bk.deleteLedger(w.getId());
            }
            LedgerHandle lh = bk.createLedger(ensemble, writeQ, ackQ, dt, password);
            long[] lat = new long[(int) entries];
            long elapsed = addAll(lh, data, entries, outstanding, lat)[0];
            lh.close();
            double secs = elapsed / 1e9;
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("event", "write");
            m.put("client", "java");
            m.put("bookkeeper_version", bookkeeperVersion());
            m.put("ledger_id", lh.getId());
            m.put("last_entry_id", lh.getLastAddConfirmed());
            m.put("entries", entries);
            m.put("size", size);
            m.put("outstanding", outstanding);
            m.put("ensemble", ensemble + "/" + writeQ + "/" + ackQ);
            m.put("digest", dt.name());
            m.put("seconds", num(secs));
            m.put("entries_per_sec", num(entries / secs));
            m.put("mb_per_sec", num(entries * (double) size / secs / 1e6));
            m.put("latency_ms", percentiles(lat, (int) entries));
            print(m);
        }
    }

    // ------------------------------------------------------------------ read

    /** LedgerHandle.batchReadAsync(long, int, long), BookKeeper 4.17.0 and later; null before. */
    static Method batchReadMethod() {
        try {
            return LedgerHandle.class.getMethod("batchReadAsync", long.class, int.class, long.class);
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    static final class ReadStats {
        final AtomicLong entries = new AtomicLong();
        final AtomicLong bytes = new AtomicLong();
        final AtomicInteger requests = new AtomicInteger();
        long[] latencies = new long[1024];
        int nlat;

        synchronized void latency(long nanos) {
            if (nlat == latencies.length) {
                latencies = Arrays.copyOf(latencies, nlat * 2);
            }
            latencies[nlat++] = nanos;
        }
    }

    /**
     * One pass over entries first..last: up to `outstanding` requests in flight; a batch that returns fewer
     * entries than asked is continued from where it stopped (BP-62 allows short batches).
     */
    @SuppressWarnings("unchecked")
    static void readPass(LedgerHandle lh, long first, long last, boolean batch, Method batchRead, int batchSize,
            long maxSize, int outstanding, ReadStats stats) throws Exception {
        Semaphore window = new Semaphore(outstanding);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        // Ranges are handed out in order; a short batch re-queues its remainder at the front.
        final java.util.ArrayDeque<long[]> pending = new java.util.ArrayDeque<>();
        for (long s = first; s <= last; s += batchSize) {
            pending.add(new long[] {s, Math.min(last, s + batchSize - 1)});
        }
        AtomicInteger inFlight = new AtomicInteger();
        Object lock = new Object();
        while (true) {
            long[] range;
            synchronized (lock) {
                while (pending.isEmpty() && inFlight.get() > 0 && failure.get() == null) {
                    lock.wait(100);
                }
                if (failure.get() != null) {
                    break;
                }
                if (pending.isEmpty()) {
                    break;
                }
                range = pending.poll();
            }
            window.acquire();
            inFlight.incrementAndGet();
            final long from = range[0];
            final long to = range[1];
            final long sent = System.nanoTime();
            CompletableFuture<LedgerEntries> f;
            if (batch) {
                f = (CompletableFuture<LedgerEntries>) batchRead.invoke(lh, from, (int) (to - from + 1), maxSize);
            } else {
                f = lh.readAsync(from, to);
            }
            f.whenComplete((entries, exc) -> {
                long got = 0;
                long bytes = 0;
                long lastId = from - 1;
                if (exc == null) {
                    try (LedgerEntries es = entries) {
                        for (LedgerEntry e : es) {
                            got++;
                            bytes += e.getEntryBuffer().readableBytes();
                            lastId = e.getEntryId();
                        }
                    } catch (Exception e) {
                        failure.compareAndSet(null, e);
                    }
                } else {
                    failure.compareAndSet(null, exc);
                }
                stats.latency(System.nanoTime() - sent);
                stats.requests.incrementAndGet();
                stats.entries.addAndGet(got);
                stats.bytes.addAndGet(bytes);
                synchronized (lock) {
                    if (exc == null && got == 0) {
                        failure.compareAndSet(null, new IllegalStateException("read returned no entry at " + from));
                    } else if (exc == null && lastId < to) {
                        pending.addFirst(new long[] {lastId + 1, to});
                    }
                    inFlight.decrementAndGet();
                    lock.notifyAll();
                }
                window.release();
            });
        }
        window.acquire(outstanding);
        window.release(outstanding);
        if (failure.get() != null) {
            Throwable t = failure.get();
            throw new IllegalStateException("read failed: " + t, t);
        }
    }

    static void read(Args a) throws Exception {
        long ledgerId = a.getLong("ledger", null);
        BookKeeper.DigestType dt = digest(a.get("digest", "CRC32C"));
        byte[] password = a.get("password", "").getBytes(StandardCharsets.UTF_8);
        String mode = a.get("mode", "batch");
        int batchSize = a.getInt("batch-size", 100);
        long maxSize = a.getLong("max-size", 1024L * 1024L);
        int outstanding = a.getInt("outstanding", 1);
        int passes = a.getInt("passes", 1);
        int warmupPasses = a.getInt("warmup-passes", 1);
        if (!mode.equals("batch") && !mode.equals("single")) {
            throw new IllegalArgumentException("--mode is batch or single, not " + mode);
        }
        boolean batch = mode.equals("batch");
        Method batchRead = null;
        if (batch) {
            batchRead = batchReadMethod();
            if (batchRead == null) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("event", "unsupported");
                m.put("operation", "batch-read");
                m.put("bookkeeper_version", bookkeeperVersion());
                m.put("message", "BookKeeper " + bookkeeperVersion() + " has no batch read API "
                        + "(LedgerHandle.batchReadAsync, BP-62, first appears in 4.17.0)");
                print(m);
                System.exit(3);
            }
        }
        try (BookKeeper bk = connect(a)) {
            LedgerHandle lh = bk.openLedgerNoRecovery(ledgerId, dt, password);
            long last = lh.getLastAddConfirmed();
            if (last < 0) {
                throw new IllegalStateException("ledger " + ledgerId + " has no entries");
            }
            for (int p = 0; p < warmupPasses; p++) {
                readPass(lh, 0, last, batch, batchRead, batchSize, maxSize, outstanding, new ReadStats());
            }
            ReadStats stats = new ReadStats();
            long start = System.nanoTime();
            for (int p = 0; p < passes; p++) {
                readPass(lh, 0, last, batch, batchRead, batchSize, maxSize, outstanding, stats);
            }
            double secs = (System.nanoTime() - start) / 1e9;
            lh.close();
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("event", "read");
            m.put("client", "java");
            m.put("bookkeeper_version", bookkeeperVersion());
            m.put("mode", mode);
            m.put("ledger_id", ledgerId);
            m.put("ledger_entries", last + 1);
            m.put("batch_size", batchSize);
            m.put("max_size", maxSize);
            m.put("outstanding", outstanding);
            m.put("passes", passes);
            m.put("requests", stats.requests.get());
            m.put("entries", stats.entries.get());
            m.put("bytes", stats.bytes.get());
            m.put("seconds", num(secs));
            m.put("entries_per_sec", num(stats.entries.get() / secs));
            m.put("mb_per_sec", num(stats.bytes.get() / secs / 1e6));
            m.put("latency_ms", percentiles(stats.latencies, stats.nlat));
            print(m);
        }
    }

    public static void main(String[] argv) {
        if (argv.length == 0) {
            System.err.println("usage: BenchClient write|read --opt value ...");
            System.exit(2);
        }
        String cmd = argv[0];
        try {
            Args a = new Args(argv, 1);
            switch (cmd) {
                case "write":
                    write(a);
                    break;
                case "read":
                    read(a);
                    break;
                default:
                    throw new IllegalArgumentException("unknown command " + cmd);
            }
        } catch (Throwable t) {
            Throwable cause = t;
            while ((cause instanceof java.util.concurrent.ExecutionException
                    || cause instanceof java.lang.reflect.InvocationTargetException) && cause.getCause() != null) {
                cause = cause.getCause();
            }
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("event", "error");
            m.put("command", cmd);
            m.put("error", cause.getClass().getName());
            m.put("message", String.valueOf(cause.getMessage()));
            print(m);
            System.exit(1);
        }
        System.exit(0);
    }
}
