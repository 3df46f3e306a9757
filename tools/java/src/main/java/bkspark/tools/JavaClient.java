package bkspark.tools;

import java.io.File;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.versioning.LongVersion;
import org.apache.bookkeeper.versioning.Version;
import org.apache.bookkeeper.versioning.Versioned;

/**
 * A small command line over Apache BookKeeper's Java client (org.apache.bookkeeper.client.BookKeeper), printing
 * one JSON object per line on stdout, each with an "event" key (other stdout lines, e.g. log warnings, are not
 * JSON objects with "event"). Exit status: 0 done, 1 a BookKeeper or usage error (event "error"), 3 the
 * operation does not exist in this BookKeeper version (event "unsupported").
 *
 * <pre>
 * create-and-write --zk URI --ensemble E --write W --ack A --digest CRC32C --password P --entries N --size S
 *                  [--close true|false] [--ledger-id ID] [--custom key=value]... [--v2 true|false]
 * read    --ledger L [--first F] [--last T] --digest D --password P [--recovery true|false] [--batch true]
 *         [--max-size BYTES] [--v2 true|false]
 * recover --ledger L --digest D --password P
 * metadata --ledger L
 * write-forever --ledger-file PATH --ensemble E --write W --ack A --digest D --password P --size S
 *         [--interval-ms MS]
 * delete  --ledger L
 * </pre>
 *
 * <p>--zk takes a metadata service URI (zk+hierarchical://host:port/root); without it the system property
 * bkspark.metadataServiceUri or the environment variable BKSPARK_METADATA_SERVICE_URI is used. A client
 * configuration file named by the system property bkspark.clientConf is loaded first, when there is one.
 *
 * <p>Payloads are deterministic: entry i is the UTF-8 text "entry-i" repeated and cut to --size bytes
 * (--size -1, the default, means exactly "entry-i"; --size 0 an empty entry). Tests recompute them.
 *
 * <p>Batch reads (LedgerHandle.batchReadAsync, BP-62) exist from BookKeeper 4.17.0; they run over the v2 wire
 * protocol only, so --batch true also selects useV2WireProtocol. On 4.16 the program prints an "unsupported"
 * event and exits with status 3.
 */
public final class JavaClient {
    private static final PrintStream OUT = System.out;

    private JavaClient() {
    }

    static final class Args {
        final Map<String, String> values = new HashMap<>();
        final List<String> custom = new ArrayList<>();

        Args(String[] argv, int from) {
            for (int i = from; i < argv.length; i++) {
                String key = argv[i];
                if (!key.startsWith("--") || i + 1 >= argv.length) {
                    throw new IllegalArgumentException("expected --option value pairs, got " + key);
                }
                String value = argv[++i];
                if (key.equals("--custom")) {
                    custom.add(value);
                } else {
                    values.put(key.substring(2), value);
                }
            }
        }

        String get(String name) {
            String v = values.get(name);
            if (v == null) {
                throw new IllegalArgumentException("missing --" + name);
            }
            return v;
        }

        String get(String name, String dflt) {
            return values.getOrDefault(name, dflt);
        }

        long getLong(String name) {
            return Long.parseLong(get(name));
        }

        long getLong(String name, long dflt) {
            String v = values.get(name);
            return v == null ? dflt : Long.parseLong(v);
        }

        int getInt(String name) {
            return Integer.parseInt(get(name));
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

    static void emit(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        synchronized (OUT) {
            OUT.println(Json.write(m));
            OUT.flush();
        }
    }

    /** Entry i's payload: "entry-i" repeated and cut to size bytes (size -1: exactly "entry-i"). */
    static byte[] payload(long i, int size) {
        byte[] unit = ("entry-" + i).getBytes(StandardCharsets.UTF_8);
        if (size < 0) {
            return unit;
        }
        byte[] out = new byte[size];
        for (int k = 0; k < size; k++) {
            out[k] = unit[k % unit.length];
        }
        return out;
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

    static BookKeeper connect(Args a, boolean forceV2) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        String confFile = System.getProperty("bkspark.clientConf");
        if (confFile != null && new File(confFile).isFile()) {
            conf.loadConf(new File(confFile).toURI().toURL());
        }
        conf.setMetadataServiceUri(metadataServiceUri(a));
        boolean v2 = forceV2 || a.getBool("v2", false);
        conf.setUseV2WireProtocol(v2);
        conf.setAddEntryTimeout(30);
        conf.setReadEntryTimeout(30);
        return new BookKeeper(conf);
    }

    static String bookkeeperVersion() {
        try {
            return VectorGen.bookkeeperVersion();
        } catch (Exception e) {
            return "unknown";
        }
    }

    // ------------------------------------------------------------------ commands

    static void createAndWrite(Args a) throws Exception {
        int ensemble = a.getInt("ensemble");
        int write = a.getInt("write");
        int ack = a.getInt("ack");
        BookKeeper.DigestType dt = digest(a.get("digest", "CRC32C"));
        byte[] password = a.get("password", "").getBytes(StandardCharsets.UTF_8);
        long entries = a.getLong("entries");
        int size = (int) a.getLong("size", -1);
        boolean close = a.getBool("close", true);
        Map<String, byte[]> custom = new LinkedHashMap<>();
        for (String kv : a.custom) {
            String[] parts = kv.split("=", 2);
            custom.put(parts[0], parts.length > 1 ? parts[1].getBytes(StandardCharsets.UTF_8) : new byte[0]);
        }
        try (BookKeeper bk = connect(a, false)) {
            LedgerHandle lh;
            boolean adv = a.values.containsKey("ledger-id");
            if (adv) {
                lh = bk.createLedgerAdv(a.getLong("ledger-id"), ensemble, write, ack, dt, password, custom);
            } else {
                lh = bk.createLedger(ensemble, write, ack, dt, password, custom);
            }
            emit("event", "created", "ledger_id", lh.getId(), "bookkeeper_version", bookkeeperVersion(),
                    "ensemble", ensembleOf(lh.getLedgerMetadata()), "digest", dt.name());
            for (long i = 0; i < entries; i++) {
                byte[] data = payload(i, size);
                long eid = adv ? lh.addEntry(i, data) : lh.addEntry(data);
                emit("event", "added", "entry_id", eid, "size", data.length);
            }
            if (close) {
                lh.close();
                emit("event", "closed", "ledger_id", lh.getId(), "last_entry_id", lh.getLastAddConfirmed(),
                        "length", lh.getLength());
            } else {
                emit("event", "left-open", "ledger_id", lh.getId(), "last_add_confirmed", lh.getLastAddConfirmed(),
                        "length", lh.getLength());
                // Closing the client would not close the ledger; its metadata stays OPEN.
            }
        }
    }

    static List<Object> ensembleOf(LedgerMetadata md) {
        List<Object> out = new ArrayList<>();
        md.getAllEnsembles().lastEntry().getValue().forEach(b -> out.add(b.toString()));
        return out;
    }

    static void read(Args a) throws Exception {
        long ledgerId = a.getLong("ledger");
        BookKeeper.DigestType dt = digest(a.get("digest", "CRC32C"));
        byte[] password = a.get("password", "").getBytes(StandardCharsets.UTF_8);
        boolean recovery = a.getBool("recovery", false);
        boolean batch = a.getBool("batch", false);
        java.lang.reflect.Method batchRead = null;
        if (batch) {
            batchRead = batchReadMethod();
            if (batchRead == null) {
                emit("event", "unsupported", "operation", "batch-read", "bookkeeper_version", bookkeeperVersion(),
                        "message", "BookKeeper " + bookkeeperVersion() + " has no batch read API: "
                                + "LedgerHandle.batchReadAsync / ReadHandle.batchRead (BP-62) first appear in 4.17.0");
                System.exit(3);
            }
        }
        try (BookKeeper bk = connect(a, batch)) {
            LedgerHandle lh = recovery ? bk.openLedger(ledgerId, dt, password)
                    : bk.openLedgerNoRecovery(ledgerId, dt, password);
            long lac = lh.getLastAddConfirmed();
            emit("event", "opened", "ledger_id", ledgerId, "last_add_confirmed", lac, "length", lh.getLength(),
                    "closed", lh.isClosed(), "recovery", recovery);
            long first = a.getLong("first", 0);
            long last = a.getLong("last", lac);
            int count = 0;
            if (last >= first && lac >= 0) {
                if (batch) {
                    LedgerMetadata md = lh.getLedgerMetadata();
                    boolean striped = md.getEnsembleSize() != md.getWriteQuorumSize();
                    int maxCount = (int) (last - first + 1);
                    long maxSize = a.getLong("max-size", 5 * 1024 * 1024);
                    // One batch returns what fits in maxSize; ask again from where it stopped.
                    long next = first;
                    int calls = 0;
                    while (next <= last) {
                        CompletableFuture<?> f = (CompletableFuture<?>) batchRead.invoke(lh, next,
                                (int) (last - next + 1), maxSize);
                        Iterable<?> entries = (Iterable<?>) f.get(60, TimeUnit.SECONDS);
                        calls++;
                        int got = 0;
                        for (Object e : entries) {
                            org.apache.bookkeeper.client.api.LedgerEntry le =
                                    (org.apache.bookkeeper.client.api.LedgerEntry) e;
                            printEntry(le.getEntryId(), le.getEntryBytes(), "batch");
                            next = le.getEntryId() + 1;
                            got++;
                            count++;
                        }
                        ((AutoCloseable) entries).close();
                        if (got == 0) {
                            throw new IllegalStateException("batch read returned no entry at " + next);
                        }
                    }
                    emit("event", "batch-read", "calls", calls, "max_count", maxCount, "max_size", maxSize,
                            "striped", striped, "v2_wire_protocol", true);
                } else {
                    Enumeration<LedgerEntry> en = lh.readEntries(first, last);
                    while (en.hasMoreElements()) {
                        LedgerEntry le = en.nextElement();
                        printEntry(le.getEntryId(), le.getEntry(), "single");
                        count++;
                    }
                }
            }
            emit("event", "done", "count", count, "last_add_confirmed", lh.getLastAddConfirmed());
            if (recovery) {
                lh.close();
            }
        }
    }

    static void printEntry(long entryId, byte[] data, String how) {
        emit("event", "entry", "entry_id", entryId, "size", data.length, "hex", Json.hex(data), "read", how);
    }

    /** LedgerHandle.batchReadAsync(long, int, long), 4.17.0 and later; null before. */
    static java.lang.reflect.Method batchReadMethod() {
        try {
            return LedgerHandle.class.getMethod("batchReadAsync", long.class, int.class, long.class);
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    static void recover(Args a) throws Exception {
        long ledgerId = a.getLong("ledger");
        BookKeeper.DigestType dt = digest(a.get("digest", "CRC32C"));
        byte[] password = a.get("password", "").getBytes(StandardCharsets.UTF_8);
        try (BookKeeper bk = connect(a, false)) {
            LedgerHandle lh = bk.openLedger(ledgerId, dt, password);
            emit("event", "recovered", "ledger_id", ledgerId, "last_entry_id", lh.getLastAddConfirmed(),
                    "length", lh.getLength(), "closed", lh.isClosed());
            lh.close();
        }
    }

    static void metadata(Args a) throws Exception {
        long ledgerId = a.getLong("ledger");
        try (BookKeeper bk = connect(a, false)) {
            Versioned<LedgerMetadata> v = bk.getLedgerManager().readLedgerMetadata(ledgerId).get(60, TimeUnit.SECONDS);
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("event", "metadata");
            m.put("ledger_id", ledgerId);
            Version version = v.getVersion();
            m.put("znode_version", version instanceof LongVersion ? ((LongVersion) version).getLongVersion() : null);
            m.putAll(VectorGen.describeMetadata(v.getValue()));
            synchronized (OUT) {
                OUT.println(Json.write(m));
                OUT.flush();
            }
        }
    }

    static void writeForever(Args a) throws Exception {
        int ensemble = a.getInt("ensemble");
        int write = a.getInt("write");
        int ack = a.getInt("ack");
        BookKeeper.DigestType dt = digest(a.get("digest", "CRC32C"));
        byte[] password = a.get("password", "").getBytes(StandardCharsets.UTF_8);
        int size = (int) a.getLong("size", -1);
        long interval = a.getLong("interval-ms", 0);
        Path ledgerFile = Paths.get(a.get("ledger-file"));
        BookKeeper bk = connect(a, false);
        LedgerHandle lh = bk.createLedger(ensemble, write, ack, dt, password);
        // Written atomically, so a reader never sees a partial id.
        Path tmp = ledgerFile.resolveSibling(ledgerFile.getFileName() + ".tmp");
        Files.write(tmp, Long.toString(lh.getId()).getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, ledgerFile, StandardCopyOption.ATOMIC_MOVE);
        emit("event", "created", "ledger_id", lh.getId(), "bookkeeper_version", bookkeeperVersion(),
                "ensemble", ensembleOf(lh.getLedgerMetadata()));
        // Runs until killed: every acknowledged entry is printed (and flushed) before the next add.
        for (long i = 0; ; i++) {
            byte[] data = payload(i, size);
            long eid = lh.addEntry(data);
            emit("event", "added", "entry_id", eid, "size", data.length);
            if (interval > 0) {
                Thread.sleep(interval);
            }
        }
    }

    static void delete(Args a) throws Exception {
        long ledgerId = a.getLong("ledger");
        try (BookKeeper bk = connect(a, false)) {
            bk.deleteLedger(ledgerId);
            emit("event", "deleted", "ledger_id", ledgerId);
        }
    }

    public static void main(String[] argv) {
        if (argv.length == 0) {
            System.err.println("usage: JavaClient create-and-write|read|recover|metadata|write-forever|delete --opt value ...");
            System.exit(2);
        }
        String cmd = argv[0];
        try {
            Args a = new Args(argv, 1);
            switch (cmd) {
                case "create-and-write":
                    createAndWrite(a);
                    break;
                case "read":
                    read(a);
                    break;
                case "recover":
                    recover(a);
                    break;
                case "metadata":
                    metadata(a);
                    break;
                case "write-forever":
                    writeForever(a);
                    break;
                case "delete":
                    delete(a);
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
            emit("event", "error", "command", cmd, "error", cause.getClass().getName(),
                    "message", String.valueOf(cause.getMessage()));
            System.exit(1);
        }
        System.exit(0);
    }
}
