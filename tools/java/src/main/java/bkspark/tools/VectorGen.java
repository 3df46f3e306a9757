package bkspark.tools;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.ByteBufAllocator;
import io.netty.buffer.Unpooled;
import io.netty.buffer.UnpooledByteBufAllocator;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Optional;
import java.util.Properties;
import org.apache.bookkeeper.bookie.Cookie;
import org.apache.bookkeeper.client.LedgerMetadataBuilder;
import org.apache.bookkeeper.client.api.DigestType;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.discover.BookieServiceInfo;
import org.apache.bookkeeper.discover.BookieServiceInfoUtils;
import org.apache.bookkeeper.meta.LedgerLayout;
import org.apache.bookkeeper.meta.LedgerMetadataSerDe;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.proto.BookieProtoEncoding;
import org.apache.bookkeeper.proto.BookieProtocol;
import org.apache.bookkeeper.util.AvailabilityOfEntriesOfLedger;
import org.apache.bookkeeper.util.ByteBufList;
import org.apache.bookkeeper.util.StringUtils;

/**
 * Prints one JSON document of byte vectors produced by Apache BookKeeper's own code (whatever version is
 * on the class path): entries and digests (DigestManager), master and MAC keys, explicit-LAC blobs, v2
 * frames (BookieProtoEncoding's PreV3 encoders, DigestManager's v2 add packaging), v3 frames (protobuf
 * messages built the way PerChannelBookieClient and the bookie's V3 processors build them, encoded by
 * BookieProtoEncoding's V3 encoders), AvailabilityOfEntriesOfLedger, ledger metadata
 * (LedgerMetadataBuilder + LedgerMetadataSerDe), BookieServiceInfo as ZKRegistrationManager writes it,
 * cookies, LAYOUT, BookieId.parse results and ledger znode paths.
 *
 * <p>Nothing in the output depends on time, randomness or the machine: two runs print the same bytes.
 *
 * <p>Usage: java -cp 'classes:lib/*' bkspark.tools.VectorGen [--out FILE]
 * (stdout without --out; with --out nothing but the file is written, so log lines cannot mix in).
 */
public final class VectorGen {
    private static final ByteBufAllocator ALLOC = UnpooledByteBufAllocator.DEFAULT;
    private static final String[] DIGESTS = {"CRC32", "HMAC", "CRC32C", "DUMMY"};
    private static final String BATCH_READ_UNSUPPORTED =
            "BATCH_READ_ENTRY needs Apache BookKeeper 4.17.0 or later (BookieProtocol.BatchedReadRequest is missing)";

    private VectorGen() {
    }

    // ------------------------------------------------------------------ helpers

    static byte[] bytes(Object refCounted) {
        ByteBuf buf;
        if (refCounted instanceof ByteBufList) {
            buf = ByteBufList.coalesce((ByteBufList) refCounted);
        } else {
            buf = (ByteBuf) refCounted;
        }
        byte[] out = new byte[buf.readableBytes()];
        buf.getBytes(buf.readerIndex(), out);
        return out;
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static byte[] pattern(int size, int seed) {
        byte[] out = new byte[size];
        for (int i = 0; i < size; i++) {
            out[i] = (byte) ((i * 31 + seed) & 0xFF);
        }
        return out;
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    static String bookkeeperVersion() throws Exception {
        try (InputStream in = BookieId.class.getClassLoader().getResourceAsStream(
                "META-INF/maven/org.apache.bookkeeper/bookkeeper-server/pom.properties")) {
            if (in == null) {
                throw new IllegalStateException("cannot find bookkeeper-server's pom.properties on the class path");
            }
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version");
        }
    }

    /** DigestManager.instantiate: its DigestType parameter is a protobuf enum whose class moved in 4.18. */
    static Object digestManager(long ledgerId, byte[] password, String type, boolean v2) throws Exception {
        Class<?> dm = Refl.cls("org.apache.bookkeeper.proto.checksum.DigestManager");
        for (java.lang.reflect.Method m : dm.getMethods()) {
            if (m.getName().equals("instantiate") && m.getParameterCount() == 5) {
                Object enumValue = Refl.enumValue(m.getParameterTypes()[2], type);
                return m.invoke(null, ledgerId, password, enumValue, ALLOC, v2);
            }
        }
        throw new Refl.Missing("DigestManager.instantiate(long, byte[], DigestType, ByteBufAllocator, boolean)");
    }

    static byte[] masterKey(byte[] password) throws Exception {
        return (byte[]) Refl.callStatic(Refl.cls("org.apache.bookkeeper.proto.checksum.DigestManager"),
                "generateMasterKey", (Object) password);
    }

    static byte[] macKey(byte[] password) throws Exception {
        return (byte[]) Refl.callStatic(Refl.cls("org.apache.bookkeeper.proto.checksum.MacDigestManager"),
                "genDigest", "mac", password);
    }

    static boolean hasBatchRead() {
        return Refl.hasClass("org.apache.bookkeeper.proto.BookieProtocol$BatchedReadRequest");
    }

    // ------------------------------------------------------------------ entries, keys, LAC blobs

    static final class EntryCase {
        final String name;
        final long ledgerId;
        final long entryId;
        final long lac;
        final long length;
        final byte[] payload;
        final byte[] password;

        EntryCase(String name, long ledgerId, long entryId, long lac, long length, byte[] payload, byte[] password) {
            this.name = name;
            this.ledgerId = ledgerId;
            this.entryId = entryId;
            this.lac = lac;
            this.length = length;
            this.payload = payload;
            this.password = password;
        }
    }

    static List<EntryCase> entryCases() {
        List<EntryCase> cases = new ArrayList<>();
        cases.add(new EntryCase("spec-hello", 1, 0, -1, 5, utf8("hello"), utf8("secret")));
        cases.add(new EntryCase("second-entry", 1, 1, 0, 11, utf8("world!"), utf8("secret")));
        cases.add(new EntryCase("empty-payload", 123456789L, 42, 41, 1000, new byte[0], new byte[0]));
        cases.add(new EntryCase("binary-big-ids", 2147483648L, 7, 6, 1L << 40, pattern(256, 0),
                new byte[] {0, 1, (byte) 0xff, (byte) 0x80}));
        cases.add(new EntryCase("unicode-password", 9, 3, 2, 64, pattern(64, 7), utf8("pässwörd")));
        cases.add(new EntryCase("max-ids", Long.MAX_VALUE, Long.MAX_VALUE - 1, Long.MAX_VALUE - 2,
                Long.MAX_VALUE, utf8("x"), utf8("p")));
        // At or over BookieProtoEncoding.SMALL_ENTRY_SIZE_THRESHOLD (16 KiB) the v2 packaging returns a
        // ByteBufList instead of one buffer: the bytes on the wire must be the same.
        cases.add(new EntryCase("large-16384", 5, 3, 2, 51000, pattern(16384, 3), utf8("secret")));
        return cases;
    }

    static List<Object> keys() throws Exception {
        List<Object> out = new ArrayList<>();
        byte[][] passwords = {new byte[0], utf8("secret"), utf8("pw"), utf8("pässwörd"),
            new byte[] {0, 1, (byte) 0xff, (byte) 0x80}, pattern(100, 1)};
        for (byte[] pw : passwords) {
            out.add(obj("password", Json.hex(pw), "master_key", Json.hex(masterKey(pw)),
                    "mac_key", Json.hex(macKey(pw))));
        }
        return out;
    }

    static List<Object> entries() throws Exception {
        List<Object> out = new ArrayList<>();
        for (EntryCase c : entryCases()) {
            boolean large = c.payload.length >= BookieProtoEncoding.SMALL_ENTRY_SIZE_THRESHOLD;
            for (String d : DIGESTS) {
                if (large && !(d.equals("CRC32C") || d.equals("HMAC"))) {
                    continue; // keeps the document small; the large path is the same for every digest
                }
                Object v3 = digestManager(c.ledgerId, c.password, d, false);
                byte[] entry = bytes(Refl.call(v3, "computeDigestAndPackageForSending", c.entryId, c.lac,
                        c.length, Unpooled.wrappedBuffer(c.payload.clone()), masterKey(c.password), 0));
                List<Object> v2frames = new ArrayList<>();
                int[] allFlags = large ? new int[] {0} : new int[] {0,
                    BookieProtocol.FLAG_RECOVERY_ADD | BookieProtocol.FLAG_HIGH_PRIORITY, BookieProtocol.FLAG_RECOVERY_ADD};
                for (int flags : allFlags) {
                    Object v2 = digestManager(c.ledgerId, c.password, d, true);
                    byte[] frame = bytes(Refl.call(v2, "computeDigestAndPackageForSending", c.entryId, c.lac,
                            c.length, Unpooled.wrappedBuffer(c.payload.clone()), masterKey(c.password), flags));
                    v2frames.add(obj("flags", flags, "frame", Json.hex(frame)));
                }
                Map<String, Object> e = obj("name", c.name + "/" + d, "digest_type", d,
                        "ledger_id", c.ledgerId, "entry_id", c.entryId, "last_add_confirmed", c.lac,
                        "length", c.length, "password", Json.hex(c.password),
                        "master_key", Json.hex(masterKey(c.password)),
                        "payload", Json.hex(c.payload), "entry", Json.hex(entry),
                        "v2_add_frames", v2frames);
                // What Java's verifier returns for the entry (the reader side of the same format).
                ByteBuf data = (ByteBuf) Refl.call(v3, "verifyDigestAndReturnData", c.entryId,
                        Unpooled.wrappedBuffer(entry));
                e.put("verified_payload_equal", Arrays.equals(bytes(data), c.payload));
                out.add(e);
            }
        }
        return out;
    }

    static List<Object> lacBlobs() throws Exception {
        List<Object> out = new ArrayList<>();
        long[][] cases = {{1, 7}, {123456789L, -1}, {2147483648L, 1000}, {Long.MAX_VALUE, Long.MAX_VALUE - 1}};
        byte[] password = utf8("secret");
        for (long[] c : cases) {
            for (String d : DIGESTS) {
                Object dm = digestManager(c[0], password, d, false);
                byte[] blob = bytes(Refl.call(dm, "computeDigestAndPackageForSendingLac", c[1]));
                long lac = (Long) Refl.call(dm, "verifyDigestAndReturnLac", Unpooled.wrappedBuffer(blob));
                out.add(obj("digest_type", d, "ledger_id", c[0], "lac", c[1], "password", Json.hex(password),
                        "blob", Json.hex(blob), "verified_lac", lac));
            }
        }
        return out;
    }

    // ------------------------------------------------------------------ v2 frames

    static Object v2RequestCodec() throws Exception {
        return Refl.constructCodec("org.apache.bookkeeper.proto.BookieProtoEncoding$RequestEnDeCoderPreV3");
    }

    static Object v2ResponseCodec() throws Exception {
        return Refl.constructCodec("org.apache.bookkeeper.proto.BookieProtoEncoding$ResponseEnDeCoderPreV3");
    }

    static byte[] encode(Object codec, Object msg) throws Exception {
        return bytes(((BookieProtoEncoding.EnDecoder) codec).encode(msg, ALLOC));
    }

    /** Decodes a frame body the way the bookie's RequestDecoder does (the 4-byte length already stripped). */
    static Object decodeRequestFrame(byte[] frame) throws Exception {
        ByteBuf body = Unpooled.wrappedBuffer(frame, 4, frame.length - 4);
        return ((BookieProtoEncoding.EnDecoder) v2RequestCodec()).decode(body);
    }

    static Object readRequest(long ledgerId, long entryId, int flags, byte[] masterKey) throws Exception {
        return Refl.callStatic(Refl.cls("org.apache.bookkeeper.proto.BookieProtocol$ReadRequest"), "create",
                BookieProtocol.CURRENT_PROTOCOL_VERSION, ledgerId, entryId, (short) flags, masterKey);
    }

    static Object batchReadRequest(long ledgerId, long startEntryId, int flags, byte[] masterKey, long requestId,
                                   int maxCount, long maxSize) throws Exception {
        if (!hasBatchRead()) {
            throw new Refl.Missing(BATCH_READ_UNSUPPORTED);
        }
        return Refl.callStatic(Refl.cls("org.apache.bookkeeper.proto.BookieProtocol$BatchedReadRequest"), "create",
                BookieProtocol.CURRENT_PROTOCOL_VERSION, ledgerId, startEntryId, (short) flags, masterKey,
                requestId, maxCount, maxSize);
    }

    static Object authMessage(String plugin, byte[] payload) throws Exception {
        return Pb.of("AuthMessage").set("authPluginName", plugin).set("payload", payload).build();
    }

    static Object responseBuilder(String method, Object... args) throws Exception {
        return Refl.callStatic(Refl.cls("org.apache.bookkeeper.proto.ResponseBuilder"), method, args);
    }

    static Map<String, Object> v2vector(String name, String kind, Map<String, Object> fields, byte[] frame) {
        Map<String, Object> m = obj("name", name, "kind", kind, "version", (int) BookieProtocol.CURRENT_PROTOCOL_VERSION);
        m.put("fields", fields);
        m.put("frame", Json.hex(frame));
        return m;
    }

    static Map<String, Object> v2() throws Exception {
        List<Object> requests = new ArrayList<>();
        List<Object> responses = new ArrayList<>();
        Object reqCodec = v2RequestCodec();
        Object respCodec = v2ResponseCodec();
        byte[] pw = utf8("secret");
        byte[] mk = masterKey(pw);
        byte[] emptyMk = masterKey(new byte[0]);

        // ADD: the client sends DigestManager's v2 packaging as is (RequestEnDeCoderPreV3 passes ByteBufs on).
        Object[][] adds = {
            {"add-crc32-hello", 1L, 0L, -1L, 5L, utf8("hello"), "CRC32", pw, 0},
            {"add-recovery-high-priority", 1L, 0L, -1L, 5L, utf8("hello"), "CRC32", pw,
                BookieProtocol.FLAG_RECOVERY_ADD | BookieProtocol.FLAG_HIGH_PRIORITY},
            {"add-crc32c-empty-password", 77L, 12L, 11L, 4096L, pattern(100, 9), "CRC32C", new byte[0], 0},
            {"add-mac", 3L, 1L, 0L, 20L, utf8("0123456789"), "HMAC", pw, (int) BookieProtocol.FLAG_RECOVERY_ADD},
        };
        List<byte[]> addFrames = new ArrayList<>();
        List<byte[]> addEntries = new ArrayList<>();
        for (Object[] a : adds) {
            byte[] password = (byte[]) a[7];
            Object dm = digestManager((Long) a[1], password, (String) a[6], true);
            byte[] frame = bytes(Refl.call(dm, "computeDigestAndPackageForSending", a[2], a[3], a[4],
                    Unpooled.wrappedBuffer((byte[]) a[5]), masterKey(password), (Integer) a[8]));
            byte[] entry = Arrays.copyOfRange(frame, 4 + 4 + 20, frame.length);
            addFrames.add(frame);
            addEntries.add(entry);
            requests.add(v2vector((String) a[0], "add", obj("flags", a[8], "master_key", Json.hex(masterKey(password)),
                    "entry", Json.hex(entry), "ledger_id", a[1], "entry_id", a[2]), frame));
        }

        // READ
        Object[][] reads = {
            {"read-plain", 1L, 0L, 0, null},
            {"read-last-entry", 1L, -1L, 0, null},
            {"read-recovery-fencing", 1L, -1L, BookieProtocol.FLAG_HIGH_PRIORITY | BookieProtocol.FLAG_DO_FENCING, mk},
            {"read-lac-fencing", 123456789L, -1L, (int) BookieProtocol.FLAG_DO_FENCING, emptyMk},
            {"read-high-priority", 2147483648L, 99L, (int) BookieProtocol.FLAG_HIGH_PRIORITY, null},
            {"read-max-ids", Long.MAX_VALUE, Long.MAX_VALUE, 0, null},
        };
        List<byte[]> readFrames = new ArrayList<>();
        for (Object[] r : reads) {
            byte[] frame = encode(reqCodec, readRequest((Long) r[1], (Long) r[2], (Integer) r[3], (byte[]) r[4]));
            readFrames.add(frame);
            requests.add(v2vector((String) r[0], "read", obj("flags", r[3], "ledger_id", r[1], "entry_id", r[2],
                    "master_key", r[4] == null ? null : Json.hex((byte[]) r[4])), frame));
        }

        // AUTH
        Object[][] auths = {
            {"auth-disabled-plugin", "AuthDisabledPlugin", new byte[0]},
            {"auth-sasl-payload", "SASLPlugin", pattern(40, 5)},
        };
        for (Object[] a : auths) {
            Object req = Refl.construct(Refl.cls("org.apache.bookkeeper.proto.BookieProtocol$AuthRequest"),
                    BookieProtocol.CURRENT_PROTOCOL_VERSION, authMessage((String) a[1], (byte[]) a[2]));
            byte[] frame = encode(reqCodec, req);
            requests.add(v2vector((String) a[0], "auth", obj("auth_plugin_name", a[1],
                    "payload", Json.hex((byte[]) a[2])), frame));
            Object resp = Refl.construct(Refl.cls("org.apache.bookkeeper.proto.BookieProtocol$AuthResponse"),
                    BookieProtocol.CURRENT_PROTOCOL_VERSION, authMessage((String) a[1], (byte[]) a[2]));
            responses.add(v2vector((String) a[0], "auth", obj("auth_plugin_name", a[1],
                    "payload", Json.hex((byte[]) a[2])), encode(respCodec, resp)));
        }

        // ADD responses: the bookie decodes the request frame and answers with ResponseBuilder.
        int[] addRcs = {BookieProtocol.EOK, BookieProtocol.EFENCED, BookieProtocol.EUA, BookieProtocol.EREADONLY};
        for (int i = 0; i < addFrames.size(); i++) {
            int rc = addRcs[i];
            Object parsed = decodeRequestFrame(addFrames.get(i));
            Object resp = rc == BookieProtocol.EOK ? responseBuilder("buildAddResponse", parsed)
                    : responseBuilder("buildErrorResponse", rc, parsed);
            responses.add(v2vector("add-response-rc" + rc, "add", obj("rc", rc, "ledger_id", adds[i][1],
                    "entry_id", adds[i][2]), encode(respCodec, resp)));
        }

        // READ responses: EOK carries the stored entry; errors carry nothing.
        for (int i = 0; i < 3; i++) {
            Object parsed = decodeRequestFrame(readFrames.get(i));
            byte[] entry = addEntries.get(0);
            Object resp = responseBuilder("buildReadResponse", Unpooled.wrappedBuffer(entry), parsed);
            responses.add(v2vector("read-response-ok-" + reads[i][0], "read", obj("rc", 0, "ledger_id", reads[i][1],
                    "entry_id", reads[i][2], "entry", Json.hex(entry)), encode(respCodec, resp)));
        }
        int[] readRcs = {BookieProtocol.ENOENTRY, BookieProtocol.ENOLEDGER, BookieProtocol.EUA, BookieProtocol.EIO,
            BookieProtocol.EUNKNOWNLEDGERSTATE};
        for (int rc : readRcs) {
            Object parsed = decodeRequestFrame(readFrames.get(0));
            Object resp = responseBuilder("buildErrorResponse", rc, parsed);
            responses.add(v2vector("read-response-rc" + rc, "read", obj("rc", rc, "ledger_id", reads[0][1],
                    "entry_id", reads[0][2], "entry", ""), encode(respCodec, resp)));
        }
        {
            // A large entry (over SMALL_ENTRY_SIZE_THRESHOLD) goes out as a ByteBufList: same bytes.
            Object dm = digestManager(5, pw, "CRC32C", false);
            byte[] big = bytes(Refl.call(dm, "computeDigestAndPackageForSending", 3L, 2L, 51000L,
                    Unpooled.wrappedBuffer(pattern(16384, 3)), mk, 0));
            Object parsed = decodeRequestFrame(encode(reqCodec, readRequest(5, 3, 0, null)));
            Object resp = responseBuilder("buildReadResponse", Unpooled.wrappedBuffer(big), parsed);
            responses.add(v2vector("read-response-large-entry", "read", obj("rc", 0, "ledger_id", 5L,
                    "entry_id", 3L, "entry", Json.hex(big)), encode(respCodec, resp)));
        }

        Map<String, Object> out = obj("requests", requests, "responses", responses);
        if (hasBatchRead()) {
            batchRead(requests, responses, reqCodec, respCodec, mk, pw);
            out.put("batch_read_supported", true);
        } else {
            out.put("batch_read_supported", false);
            out.put("batch_read_unsupported_reason", BATCH_READ_UNSUPPORTED);
        }
        return out;
    }

    /** BATCH_READ_ENTRY (opcode 7), 4.17.0 and later only. */
    static void batchRead(List<Object> requests, List<Object> responses, Object reqCodec, Object respCodec,
                          byte[] mk, byte[] pw) throws Exception {
        Object[][] batches = {
            {"batch-read-spec", 1L, 0L, 0, null, 42L, 10, 1048576L},
            {"batch-read-fencing", 1L, 0L, BookieProtocol.FLAG_DO_FENCING | BookieProtocol.FLAG_HIGH_PRIORITY,
                mk, 43L, 100, 5242880L},
            {"batch-read-unbounded-count", 2147483648L, 1000L, 0, null, Long.MAX_VALUE, 0, 5242880L},
        };
        List<byte[]> frames = new ArrayList<>();
        for (Object[] b : batches) {
            byte[] frame = encode(reqCodec, batchReadRequest((Long) b[1], (Long) b[2], (Integer) b[3], (byte[]) b[4],
                    (Long) b[5], (Integer) b[6], (Long) b[7]));
            frames.add(frame);
            requests.add(v2vector((String) b[0], "batch_read", obj("flags", b[3], "ledger_id", b[1],
                    "start_entry_id", b[2], "request_id", b[5], "max_count", b[6], "max_size", b[7],
                    "master_key", b[4] == null ? null : Json.hex((byte[]) b[4])), frame));
        }
        // Responses: one entry, three entries, none (error rc).
        Object dm = digestManager(1, pw, "CRC32", false);
        List<byte[]> entries = new ArrayList<>();
        long length = 0;
        String[] payloads = {"hello", "world", "!"};
        for (int i = 0; i < payloads.length; i++) {
            length += payloads[i].length();
            entries.add(bytes(Refl.call(dm, "computeDigestAndPackageForSending", (long) i, (long) i - 1, length,
                    Unpooled.wrappedBuffer(utf8(payloads[i])), mk, 0)));
        }
        int[] counts = {1, 3};
        for (int count : counts) {
            Object parsed = decodeRequestFrame(frames.get(0));
            ByteBufList data = ByteBufList.get(Unpooled.wrappedBuffer(entries.get(0)));
            List<Object> hexes = new ArrayList<>();
            hexes.add(Json.hex(entries.get(0)));
            for (int i = 1; i < count; i++) {
                data.add(Unpooled.wrappedBuffer(entries.get(i)));
                hexes.add(Json.hex(entries.get(i)));
            }
            Object resp = responseBuilder("buildBatchedReadResponse", data, parsed);
            responses.add(v2vector("batch-read-response-" + count, "batch_read", obj("rc", 0, "ledger_id", 1L,
                    "start_entry_id", 0L, "request_id", 42L, "entries", hexes), encode(respCodec, resp)));
        }
        for (int rc : new int[] {BookieProtocol.ENOLEDGER, BookieProtocol.ENOENTRY}) {
            Object parsed = decodeRequestFrame(frames.get(2));
            Object resp = responseBuilder("buildErrorResponse", rc, parsed);
            responses.add(v2vector("batch-read-response-rc" + rc, "batch_read", obj("rc", rc,
                    "ledger_id", 2147483648L, "start_entry_id", 1000L, "request_id", Long.MAX_VALUE,
                    "entries", new ArrayList<>()), encode(respCodec, resp)));
        }
    }

    // ------------------------------------------------------------------ v3 frames

    static Pb header(String op, long txnId, Integer priority) {
        Pb h = Pb.of("BKPacketHeader").set("version", Pb.en("VERSION_THREE")).set("operation", Pb.en(op))
                .set("txnId", txnId);
        if (priority != null) {
            h.set("priority", priority);
        }
        return h;
    }

    static Map<String, Object> v3vector(String name, Pb spec, byte[] frame) {
        return obj("name", name, "message", spec.describe(), "frame", Json.hex(frame));
    }

    static Map<String, Object> v3() throws Exception {
        Object reqCodec = Refl.constructCodec("org.apache.bookkeeper.proto.BookieProtoEncoding$RequestEnDecoderV3");
        Object respCodec = Refl.constructCodec("org.apache.bookkeeper.proto.BookieProtoEncoding$ResponseEnDecoderV3");
        byte[] pw = utf8("secret");
        byte[] mk = masterKey(pw);
        Object dm = digestManager(1, pw, "CRC32", false);
        byte[] entry = bytes(Refl.call(dm, "computeDigestAndPackageForSending", 0L, -1L, 5L,
                Unpooled.wrappedBuffer(utf8("hello")), mk, 0));
        byte[] lacBlob = bytes(Refl.call(dm, "computeDigestAndPackageForSendingLac", 7L));
        int high = 100; // PerChannelBookieClient.DEFAULT_HIGH_PRIORITY_VALUE

        List<Object[]> reqs = new ArrayList<>();
        // PerChannelBookieClient.addEntry
        reqs.add(new Object[] {"add", Pb.of("Request").set("header", header("ADD_ENTRY", 1, null))
                .set("addRequest", Pb.of("AddRequest").set("ledgerId", 1L).set("entryId", 0L)
                        .set("masterKey", mk).set("body", entry))});
        reqs.add(new Object[] {"add-recovery-high-priority", Pb.of("Request")
                .set("header", header("ADD_ENTRY", 2, high))
                .set("addRequest", Pb.of("AddRequest").set("ledgerId", 1L).set("entryId", 0L)
                        .set("masterKey", mk).set("body", entry).set("flag", Pb.en("RECOVERY_ADD")))});
        reqs.add(new Object[] {"add-deferred-sync", Pb.of("Request").set("header", header("ADD_ENTRY", 3, null))
                .set("addRequest", Pb.of("AddRequest").set("ledgerId", 1L).set("entryId", 0L)
                        .set("masterKey", mk).set("body", entry).set("writeFlags", 1))});
        // PerChannelBookieClient.readEntryInternal
        reqs.add(new Object[] {"read", Pb.of("Request").set("header", header("READ_ENTRY", 4, null))
                .set("readRequest", Pb.of("ReadRequest").set("ledgerId", 1L).set("entryId", 0L))});
        reqs.add(new Object[] {"read-fencing-recovery", Pb.of("Request").set("header", header("READ_ENTRY", 5, high))
                .set("readRequest", Pb.of("ReadRequest").set("ledgerId", 1L).set("entryId", -1L)
                        .set("flag", Pb.en("FENCE_LEDGER")).set("masterKey", mk))});
        reqs.add(new Object[] {"read-long-poll", Pb.of("Request").set("header", header("READ_ENTRY", 6, null))
                .set("readRequest", Pb.of("ReadRequest").set("ledgerId", 1L).set("entryId", 5L)
                        .set("previousLAC", 4L).set("timeOut", 1000L))});
        reqs.add(new Object[] {"read-long-poll-piggyback", Pb.of("Request").set("header", header("READ_ENTRY", 8, high))
                .set("readRequest", Pb.of("ReadRequest").set("ledgerId", 1L).set("entryId", -1L)
                        .set("previousLAC", 4L).set("timeOut", 1000L).set("flag", Pb.en("ENTRY_PIGGYBACK")))});
        reqs.add(new Object[] {"read-with-request-context", Pb.of("Request").set("header", header("READ_ENTRY", 9, null))
                .set("readRequest", Pb.of("ReadRequest").set("ledgerId", 2147483648L).set("entryId", 3L))
                .add("requestContext", Pb.of("ContextPair").set("key", "traceid").set("value", "abc-123"))});
        reqs.add(new Object[] {"read-lac", Pb.of("Request").set("header", header("READ_LAC", 10, null))
                .set("readLacRequest", Pb.of("ReadLacRequest").set("ledgerId", 1L))});
        reqs.add(new Object[] {"write-lac", Pb.of("Request").set("header", header("WRITE_LAC", 11, null))
                .set("writeLacRequest", Pb.of("WriteLacRequest").set("ledgerId", 1L).set("lac", 7L)
                        .set("masterKey", mk).set("body", lacBlob))});
        reqs.add(new Object[] {"force-ledger", Pb.of("Request").set("header", header("FORCE_LEDGER", 12, null))
                .set("forceLedgerRequest", Pb.of("ForceLedgerRequest").set("ledgerId", 1L))});
        reqs.add(new Object[] {"get-bookie-info", Pb.of("Request").set("header", header("GET_BOOKIE_INFO", 13, null))
                .set("getBookieInfoRequest", Pb.of("GetBookieInfoRequest").set("requested", 3L))});
        reqs.add(new Object[] {"get-list-of-entries", Pb.of("Request")
                .set("header", header("GET_LIST_OF_ENTRIES_OF_LEDGER", 14, null))
                .set("getListOfEntriesOfLedgerRequest", Pb.of("GetListOfEntriesOfLedgerRequest")
                        .set("ledgerId", 123456789L))});
        reqs.add(new Object[] {"start-tls", Pb.of("Request").set("header", header("START_TLS", 15, null))
                .set("startTLSRequest", Pb.of("StartTLSRequest"))});
        reqs.add(new Object[] {"auth", Pb.of("Request").set("header", header("AUTH", 16, null))
                .set("authRequest", Pb.of("AuthMessage").set("authPluginName", "AuthDisabledPlugin")
                        .set("payload", new byte[0]))});
        reqs.add(new Object[] {"big-txn-id", Pb.of("Request").set("header", header("READ_ENTRY", Long.MAX_VALUE, null))
                .set("readRequest", Pb.of("ReadRequest").set("ledgerId", Long.MAX_VALUE).set("entryId", 0L))});

        List<Object> requests = new ArrayList<>();
        for (Object[] r : reqs) {
            Pb spec = (Pb) r[1];
            requests.add(v3vector((String) r[0], spec, bytes(((BookieProtoEncoding.EnDecoder) reqCodec)
                    .encode(spec.build(), ALLOC))));
        }

        // Responses as the bookie's *ProcessorV3 classes build them (PacketProcessorBaseV3.getHeader: a new
        // header without priority; top-level status = inner status).
        List<Object[]> resps = new ArrayList<>();
        resps.add(new Object[] {"add-ok", resp("ADD_ENTRY", 1, "EOK", "addResponse",
                Pb.of("AddResponse").set("ledgerId", 1L).set("entryId", 0L).set("status", Pb.en("EOK")))});
        resps.add(new Object[] {"add-fenced", resp("ADD_ENTRY", 2, "EFENCED", "addResponse",
                Pb.of("AddResponse").set("ledgerId", 1L).set("entryId", 0L).set("status", Pb.en("EFENCED")))});
        resps.add(new Object[] {"read-ok", resp("READ_ENTRY", 4, "EOK", "readResponse",
                Pb.of("ReadResponse").set("ledgerId", 1L).set("entryId", 0L).set("body", entry)
                        .set("maxLAC", -1L).set("status", Pb.en("EOK")))});
        resps.add(new Object[] {"read-fence-ok", resp("READ_ENTRY", 5, "EOK", "readResponse",
                Pb.of("ReadResponse").set("ledgerId", 1L).set("entryId", -1L).set("body", entry)
                        .set("status", Pb.en("EOK")))});
        resps.add(new Object[] {"read-no-entry", resp("READ_ENTRY", 4, "ENOENTRY", "readResponse",
                Pb.of("ReadResponse").set("ledgerId", 1L).set("entryId", 0L).set("status", Pb.en("ENOENTRY")))});
        resps.add(new Object[] {"read-unknown-ledger-state", resp("READ_ENTRY", 4, "EUNKNOWNLEDGERSTATE",
                "readResponse", Pb.of("ReadResponse").set("ledgerId", 1L).set("entryId", 0L)
                        .set("status", Pb.en("EUNKNOWNLEDGERSTATE")))});
        resps.add(new Object[] {"read-long-poll-piggyback", resp("READ_ENTRY", 8, "EOK", "readResponse",
                Pb.of("ReadResponse").set("ledgerId", 1L).set("entryId", 0L).set("body", entry)
                        .set("maxLAC", 5L).set("lacUpdateTimestamp", 1700000000123L).set("status", Pb.en("EOK")))});
        resps.add(new Object[] {"read-lac-ok", resp("READ_LAC", 10, "EOK", "readLacResponse",
                Pb.of("ReadLacResponse").set("ledgerId", 1L).set("lacBody", lacBlob).set("lastEntryBody", entry)
                        .set("status", Pb.en("EOK")))});
        resps.add(new Object[] {"write-lac-ok", resp("WRITE_LAC", 11, "EOK", "writeLacResponse",
                Pb.of("WriteLacResponse").set("ledgerId", 1L).set("status", Pb.en("EOK")))});
        resps.add(new Object[] {"force-ledger-ok", resp("FORCE_LEDGER", 12, "EOK", "forceLedgerResponse",
                Pb.of("ForceLedgerResponse").set("ledgerId", 1L).set("status", Pb.en("EOK")))});
        resps.add(new Object[] {"get-bookie-info-ok", resp("GET_BOOKIE_INFO", 13, "EOK", "getBookieInfoResponse",
                Pb.of("GetBookieInfoResponse").set("freeDiskSpace", 1099511627776L)
                        .set("totalDiskCapacity", 4398046511104L).set("status", Pb.en("EOK")))});
        byte[] avail = new AvailabilityOfEntriesOfLedger(new long[] {0, 1, 2, 5, 6, 10}).serializeStateOfEntriesOfLedger();
        resps.add(new Object[] {"get-list-of-entries-ok", resp("GET_LIST_OF_ENTRIES_OF_LEDGER", 14, "EOK",
                "getListOfEntriesOfLedgerResponse", Pb.of("GetListOfEntriesOfLedgerResponse")
                        .set("ledgerId", 123456789L).set("availabilityOfEntriesOfLedger", avail)
                        .set("status", Pb.en("EOK")))});
        resps.add(new Object[] {"start-tls-ok", resp("START_TLS", 15, "EOK", "startTLSResponse",
                Pb.of("StartTLSResponse"))});
        resps.add(new Object[] {"start-tls-unsupported", Pb.of("Response").set("header", header("START_TLS", 15, null))
                .set("status", Pb.en("EBADREQ"))});
        // AuthHandler / BookieRequestProcessor copy the request header verbatim for AUTH.
        resps.add(new Object[] {"auth-disabled", Pb.of("Response").set("header", header("AUTH", 16, null))
                .set("status", Pb.en("EOK")).set("authResponse", Pb.of("AuthMessage")
                        .set("authPluginName", "AuthDisabledPlugin").set("payload", new byte[0]))});
        // An unknown operation: EBADREQ with the request header copied (priority kept).
        if (hasBatchRead()) { // OperationType.BATCH_READ_ENTRY = 12 exists from 4.17.0 on
            resps.add(new Object[] {"batch-read-over-v3-rejected", Pb.of("Response")
                    .set("header", header("BATCH_READ_ENTRY", 17, high)).set("status", Pb.en("EBADREQ"))});
        }

        List<Object> responses = new ArrayList<>();
        for (Object[] r : resps) {
            Pb spec = (Pb) r[1];
            responses.add(v3vector((String) r[0], spec, bytes(((BookieProtoEncoding.EnDecoder) respCodec)
                    .encode(spec.build(), ALLOC))));
        }
        return obj("requests", requests, "responses", responses);
    }

    static Pb resp(String op, long txnId, String status, String field, Pb inner) {
        return Pb.of("Response").set("header", header(op, txnId, null)).set("status", Pb.en(status)).set(field, inner);
    }

    static List<Object> availability() {
        long[][] sets = {
            {},
            {0},
            {0, 1, 2, 3, 4},
            {0, 1, 2, 5, 6, 10},
            {3, 7, 8, 9, 100, 101, 1000000},
            {Integer.MAX_VALUE, 2147483648L, 2147483649L},
        };
        List<Object> out = new ArrayList<>();
        for (long[] s : sets) {
            AvailabilityOfEntriesOfLedger a = new AvailabilityOfEntriesOfLedger(s.clone());
            List<Object> ids = new ArrayList<>();
            for (long id : s) {
                ids.add(id);
            }
            out.add(obj("entries", ids, "total", a.getTotalNumOfAvailableEntries(),
                    "bytes", Json.hex(a.serializeStateOfEntriesOfLedger())));
        }
        return out;
    }

    // ------------------------------------------------------------------ metadata formats

    static List<BookieId> bookies(String... ids) {
        List<BookieId> out = new ArrayList<>();
        for (String id : ids) {
            out.add(BookieId.parse(id));
        }
        return out;
    }

    static final class MdCase {
        final String name;
        final LedgerMetadataBuilder builder;

        MdCase(String name, LedgerMetadataBuilder builder) {
            this.name = name;
            this.builder = builder;
        }
    }

    static List<MdCase> metadataCases() {
        List<MdCase> cases = new ArrayList<>();
        List<BookieId> e1 = bookies("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181");
        List<BookieId> e2 = bookies("10.0.0.1:3181", "10.0.0.4:3181", "10.0.0.3:3181");
        List<BookieId> e3 = bookies("10.0.0.5:3181", "10.0.0.4:3181", "10.0.0.3:3181");
        Map<String, byte[]> demo = new LinkedHashMap<>();
        demo.put("app", utf8("demo"));
        Map<String, byte[]> many = new LinkedHashMap<>();
        many.put("application", utf8("bkspark"));
        many.put("binary", new byte[] {0, 1, 2, (byte) 0xff, '\n', '"', '\\'});
        many.put("empty", new byte[0]);
        for (int version : new int[] {3, 2}) {
            String v = "v" + version + "-";
            cases.add(new MdCase(v + "open-spec-example", LedgerMetadataBuilder.create().withId(1)
                    .withMetadataFormatVersion(version).withEnsembleSize(3).withWriteQuorumSize(2).withAckQuorumSize(2)
                    .withDigestType(DigestType.CRC32C).withPassword(utf8("pw")).newEnsembleEntry(0, e1)
                    .withCustomMetadata(demo).withCToken(12345)));
            cases.add(new MdCase(v + "closed-three-segments-mac-ctime", LedgerMetadataBuilder.create().withId(2)
                    .withMetadataFormatVersion(version).withEnsembleSize(3).withWriteQuorumSize(3).withAckQuorumSize(2)
                    .withDigestType(DigestType.MAC).withPassword(utf8("secret")).newEnsembleEntry(0, e1)
                    .newEnsembleEntry(50, e2).newEnsembleEntry(1000, e3).withClosedState().withLastEntryId(1500)
                    .withLength(1234567890123L).withCreationTime(1700000000000L).storingCreationTime(true)
                    .withCustomMetadata(many)));
            cases.add(new MdCase(v + "in-recovery-crc32-empty-password", LedgerMetadataBuilder.create().withId(3)
                    .withMetadataFormatVersion(version).withEnsembleSize(3).withWriteQuorumSize(3).withAckQuorumSize(3)
                    .withDigestType(DigestType.CRC32).withPassword(new byte[0]).newEnsembleEntry(0, e1)
                    .withInRecoveryState()));
            cases.add(new MdCase(v + "closed-empty-dummy-bookie-names", LedgerMetadataBuilder.create().withId(4)
                    .withMetadataFormatVersion(version).withEnsembleSize(2).withWriteQuorumSize(2).withAckQuorumSize(1)
                    .withDigestType(DigestType.DUMMY).withPassword(new byte[] {0, (byte) 0xff, 'a'})
                    .newEnsembleEntry(0, bookies("bookie-1", "bookie_2.example")).withClosedState()
                    .withLastEntryId(-1).withLength(0)));
            // (LedgerMetadataSerDe cannot write metadata without a password: the Java client always sets one.)
            cases.add(new MdCase(v + "open-striped-two-segments", LedgerMetadataBuilder.create().withId(5)
                    .withMetadataFormatVersion(version).withEnsembleSize(5).withWriteQuorumSize(3).withAckQuorumSize(2)
                    .withDigestType(DigestType.CRC32C).withPassword(utf8("a b\tc"))
                    .newEnsembleEntry(0, bookies("b1:3181", "b2:3181", "b3:3181", "b4:3181", "b5:3181"))
                    .newEnsembleEntry(7, bookies("b1:3181", "b2:3181", "b6:3181", "b4:3181", "b5:3181"))));
        }
        cases.add(new MdCase("v3-big-ctoken-ctime-open", LedgerMetadataBuilder.create().withId(6)
                .withMetadataFormatVersion(3).withEnsembleSize(1).withWriteQuorumSize(1).withAckQuorumSize(1)
                .withDigestType(DigestType.CRC32C).withPassword(utf8("p")).newEnsembleEntry(0, bookies("127.0.0.1:3181"))
                .withCreationTime(1234L).storingCreationTime(true).withCToken(Long.MAX_VALUE)));
        cases.add(new MdCase("v1-closed", LedgerMetadataBuilder.create().withId(7)
                .withMetadataFormatVersion(1).withEnsembleSize(3).withWriteQuorumSize(2).withAckQuorumSize(2)
                .withDigestType(DigestType.CRC32).withPassword(new byte[0]).newEnsembleEntry(0, e1)
                .newEnsembleEntry(10, e2).withClosedState().withLastEntryId(20).withLength(2100)));
        cases.add(new MdCase("v1-open", LedgerMetadataBuilder.create().withId(8)
                .withMetadataFormatVersion(1).withEnsembleSize(3).withWriteQuorumSize(3).withAckQuorumSize(3)
                .withDigestType(DigestType.CRC32).withPassword(new byte[0]).newEnsembleEntry(0, e1)));
        cases.add(new MdCase("v1-in-recovery", LedgerMetadataBuilder.create().withId(9)
                .withMetadataFormatVersion(1).withEnsembleSize(3).withWriteQuorumSize(3).withAckQuorumSize(3)
                .withDigestType(DigestType.CRC32).withPassword(new byte[0]).newEnsembleEntry(0, e1)
                .withInRecoveryState()));
        return cases;
    }

    static String protoDigestName(DigestType t) {
        return t == DigestType.MAC ? "HMAC" : t.name();
    }

    static Map<String, Object> describeMetadata(LedgerMetadata md) {
        Map<String, Object> ensembles = new LinkedHashMap<>();
        NavigableMap<Long, ? extends List<BookieId>> all = md.getAllEnsembles();
        for (Map.Entry<Long, ? extends List<BookieId>> e : all.entrySet()) {
            List<Object> ids = new ArrayList<>();
            for (BookieId b : e.getValue()) {
                ids.add(b.toString());
            }
            ensembles.put(String.valueOf(e.getKey()), ids);
        }
        Map<String, Object> custom = new LinkedHashMap<>();
        for (Map.Entry<String, byte[]> e : md.getCustomMetadata().entrySet()) {
            custom.put(e.getKey(), Json.hex(e.getValue()));
        }
        return obj("ensemble_size", md.getEnsembleSize(), "write_quorum_size", md.getWriteQuorumSize(),
                "ack_quorum_size", md.getAckQuorumSize(), "state", md.getState().name(),
                "last_entry_id", md.getLastEntryId(), "length", md.getLength(),
                "has_password", md.hasPassword(), "password", md.hasPassword() ? Json.hex(md.getPassword()) : null,
                "digest_type", md.hasPassword() ? protoDigestName(md.getDigestType()) : null,
                "ensembles", ensembles, "ctime", md.getCtime(), "custom_metadata", custom,
                "ctoken", md.getCToken(), "format_version", md.getMetadataFormatVersion());
    }

    static List<Object> ledgerMetadata() throws Exception {
        LedgerMetadataSerDe serde = new LedgerMetadataSerDe();
        List<Object> out = new ArrayList<>();
        for (MdCase c : metadataCases()) {
            LedgerMetadata md = c.builder.build();
            byte[] data = serde.serialize(md);
            // What Java reads back from those bytes (ctime falls back to the znode's ctime when absent:
            // we pass none here).
            LedgerMetadata parsed = serde.parseConfig(data, md.getLedgerId(), Optional.empty());
            Map<String, Object> m = obj("name", c.name, "ledger_id", md.getLedgerId(),
                    "format_version", md.getMetadataFormatVersion(),
                    "stores_ctime", storesCtime(md), "written", describeMetadata(md));
            m.put("parsed", describeMetadata(parsed));
            m.put("bytes", Json.hex(data));
            if (md.getMetadataFormatVersion() < 3) {
                m.put("text", new String(data, StandardCharsets.UTF_8));
            }
            out.add(m);
        }
        return out;
    }

    static boolean storesCtime(LedgerMetadata md) throws Exception {
        Class<?> u = Refl.cls("org.apache.bookkeeper.client.LedgerMetadataUtils");
        return (Boolean) Refl.callStatic(u, "shouldStoreCtime", md);
    }

    static List<Object> serviceInfo() throws Exception {
        List<Object> out = new ArrayList<>();
        Class<?> rm = Refl.cls("org.apache.bookkeeper.discover.ZKRegistrationManager");
        // What BookieService.publishInfo registers: one bookie-rpc endpoint, extensions ["tls"] with TLS.
        Object[][] cases = {
            {"plain", new String[] {"bookie", "127.0.0.1", "3181", "bookie-rpc"}, new String[0], new String[0],
                null, null},
            {"tls", new String[] {"bookie", "10.1.2.3", "3182", "bookie-rpc"}, new String[0], new String[] {"tls"},
                null, null},
            {"with-http-and-properties", new String[] {"bookie", "bk-0.bk.svc.cluster.local", "3181", "bookie-rpc"},
                new String[] {"sasl"}, new String[0], new String[] {"httpserver", "bk-0.bk.svc.cluster.local", "8000",
                    "http"}, "autorecovery.enabled=true"},
        };
        for (Object[] c : cases) {
            List<BookieServiceInfo.Endpoint> endpoints = new ArrayList<>();
            String[] e = (String[]) c[1];
            endpoints.add(new BookieServiceInfo.Endpoint(e[0], Integer.parseInt(e[2]), e[1], e[3],
                    Arrays.asList((String[]) c[2]), Arrays.asList((String[]) c[3])));
            if (c[4] != null) {
                String[] h = (String[]) c[4];
                endpoints.add(new BookieServiceInfo.Endpoint(h[0], Integer.parseInt(h[2]), h[1], h[3],
                        new ArrayList<>(), new ArrayList<>()));
            }
            Map<String, String> props = new LinkedHashMap<>();
            if (c[5] != null) {
                String[] kv = ((String) c[5]).split("=", 2);
                props.put(kv[0], kv[1]);
            }
            BookieServiceInfo info = new BookieServiceInfo(props, endpoints);
            byte[] data = (byte[]) Refl.callStatic(rm, "serializeBookieServiceInfo", info);
            out.add(obj("name", c[0], "info", describeServiceInfo(info), "bytes", Json.hex(data)));
        }
        return out;
    }

    static Map<String, Object> describeServiceInfo(BookieServiceInfo info) {
        List<Object> endpoints = new ArrayList<>();
        for (BookieServiceInfo.Endpoint e : info.getEndpoints()) {
            endpoints.add(obj("id", e.getId(), "host", e.getHost(), "port", e.getPort(), "protocol", e.getProtocol(),
                    "auth", new ArrayList<Object>(e.getAuth()), "extensions", new ArrayList<Object>(e.getExtensions())));
        }
        return obj("endpoints", endpoints, "properties", new LinkedHashMap<String, Object>(info.getProperties()));
    }

    static List<Object> legacyServiceInfo() throws Exception {
        List<Object> out = new ArrayList<>();
        for (String id : new String[] {"127.0.0.1:3181", "bookie.example.com:4181"}) {
            out.add(obj("bookie_id", id,
                    "info", describeServiceInfo(BookieServiceInfoUtils.buildLegacyBookieServiceInfo(id))));
        }
        return out;
    }

    static List<Object> cookies() throws Exception {
        List<Object> out = new ArrayList<>();
        Object[][] cases = {
            {"v5-full", 5, "127.0.0.1:3181", "/data/bk/journal", new String[] {"/data/bk/ledgers"},
                "2ac1c5c6-9b0b-4a62-9c3e-6b5d3a1d0e7f", new String[] {"/data/bk/index"}},
            {"v5-no-instance-no-index", 5, "bookie-1", "/j1,/j2", new String[] {"/l1", "/l2", "/l3"}, null, null},
            {"v4-layout", 4, "10.0.0.1:3181", "/journal", new String[] {"/ledgers"}, "instance", null},
            {"v3-plain-lines", 3, "10.0.0.1:3181", "/journal", new String[] {"/ledgers", "/ledgers2"}, null, null},
            {"v5-quotes-and-unicode", 5, "host:3181", "/data/\"q\"/j", new String[] {"/data/ü"}, "id\\1", null},
        };
        for (Object[] c : cases) {
            Cookie.Builder b = Cookie.newBuilder().setLayoutVersion((Integer) c[1]).setBookieId((String) c[2])
                    .setJournalDirs((String) c[3]).setLedgerDirs(Cookie.encodeDirPaths((String[]) c[4]));
            if (c[5] != null) {
                b.setInstanceId((String) c[5]);
            }
            if (c[6] != null) {
                b.setIndexDirs(Cookie.encodeDirPaths((String[]) c[6]));
            }
            Cookie cookie = b.build();
            // Cookie.writeToRegistrationManager writes toString() as UTF-8 bytes.
            byte[] data = cookie.toString().getBytes(StandardCharsets.UTF_8);
            out.add(obj("name", c[0], "layout_version", c[1], "bookie_host", c[2], "journal_dir", c[3],
                    "ledger_dirs", Cookie.encodeDirPaths((String[]) c[4]), "instance_id", c[5],
                    "index_dirs", c[6] == null ? null : Cookie.encodeDirPaths((String[]) c[6]),
                    "text", cookie.toString(), "bytes", Json.hex(data), "java_parsed", parsedCookie(data)));
        }
        return out;
    }

    /** What Cookie.parseFromBytes (how a bookie reads the znode) makes of the bytes, or the exception. */
    static Map<String, Object> parsedCookie(byte[] data) throws Exception {
        try {
            Cookie c = Cookie.parseFromBytes(data);
            return obj("layout_version", Refl.field(c, "layoutVersion"), "bookie_host", Refl.field(c, "bookieId"),
                    "journal_dir", Refl.field(c, "journalDirs"), "ledger_dirs", Refl.field(c, "ledgerDirs"),
                    "instance_id", Refl.field(c, "instanceId"), "index_dirs", Refl.field(c, "indexDirs"));
        } catch (java.io.IOException | RuntimeException e) {
            return obj("error", e.getClass().getName());
        }
    }

    /** Cookie texts as older bookies wrote them (or broken ones), and what Cookie.parseFromBytes makes of them. */
    static List<Object> cookieTexts() throws Exception {
        String[] texts = {
            "3\n10.0.0.1:3181\n/journal\n1\t/ledgers\n",
            "3\n10.0.0.1:3181\n/journal\n2\t/l1\t/l2",
            "4\nbookieHost: \"10.0.0.1:3181\"\njournalDir: \"/journal\"\nledgerDirs: \"1\\t/ledgers\"\n",
            "5\nbookieHost: \"b\"\njournalDir: \"/j\"\nledgerDirs: \"1\\t/l\"\ninstanceId: \"\"\n",
            "2\n10.0.0.1:3181\n/journal\n1\t/ledgers\n",
            "5\nnotAField: 1\n",
            "x\n",
        };
        List<Object> out = new ArrayList<>();
        for (String t : texts) {
            byte[] data = t.getBytes(StandardCharsets.UTF_8);
            out.add(obj("text", t, "java_parsed", parsedCookie(data)));
        }
        return out;
    }

    static List<Object> layouts() throws Exception {
        List<Object> out = new ArrayList<>();
        String[] factories = {
            "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory",
            "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory",
            "org.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory",
            "org.apache.bookkeeper.meta.FlatLedgerManagerFactory",
            "org.apache.pulsar.shade.org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory",
        };
        for (String f : factories) {
            LedgerLayout layout = new LedgerLayout(f, 1);
            byte[] data = layout.serialize();
            LedgerLayout back = LedgerLayout.parseLayout(data);
            out.add(obj("factory", f, "manager_version", 1, "layout_format_version", back.getLayoutFormatVersion(),
                    "text", new String(data, StandardCharsets.UTF_8), "bytes", Json.hex(data)));
        }
        return out;
    }

    static List<Object> bookieIds() {
        String[] candidates = {
            "127.0.0.1:3181", "localhost:3181", "bookie-1", "bookie_1", "my.bookie.example.com:3181",
            "bk-0.bk.svc.cluster.local:3181", "UPPER.case-Name_1", "12345", "a", "host:port", "host:0",
            "host:65536", "host:-1", "", " ", "foo bar", "bookie:3181:extra", "with/slash", "with\\backslash",
            "ünicode", "readonly", "bookie!", "bk@host", "[::1]:3181", "::1", "-leading-dash", "trailing.",
            ".leading-dot", "a:b:c", "x:", ":3181", "semi;colon", "tab\tchar", "percent%20",
        };
        List<Object> out = new ArrayList<>();
        for (String c : candidates) {
            Map<String, Object> m = obj("text", c);
            try {
                BookieId id = BookieId.parse(c);
                m.put("valid", true);
                m.put("id", id.toString());
            } catch (RuntimeException e) {
                m.put("valid", false);
                m.put("error", e.getClass().getName());
            }
            out.add(m);
        }
        return out;
    }

    static List<Object> ledgerPaths() throws Exception {
        long[] ids = {0, 1, 5, 9999, 10000, 123456789L, 2147483646L, 2147483647L, 2147483648L, 4294967301L,
            1099511627776L, 9223372036854775807L};
        List<Object> out = new ArrayList<>();
        for (long id : ids) {
            String hybrid = StringUtils.getHybridHierarchicalLedgerPath(id);
            String lng = StringUtils.getLongHierarchicalLedgerPath(id);
            Map<String, Object> m = obj("ledger_id", id, "hierarchical", hybrid, "longhierarchical", lng);
            if (id < Integer.MAX_VALUE) {
                m.put("legacyhierarchical", StringUtils.getShortHierarchicalLedgerPath(id));
            }
            m.put("flat", "L" + StringUtils.getZKStringId(id));
            // The ledger managers parse the path below the root without its leading '/'.
            m.put("hierarchical_parsed_back", StringUtils.stringToLongHierarchicalLedgerId(hybrid.substring(1)));
            m.put("longhierarchical_parsed_back", StringUtils.stringToLongHierarchicalLedgerId(lng.substring(1)));
            out.add(m);
        }
        return out;
    }

    public static void main(String[] args) throws Exception {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("bookkeeper_version", bookkeeperVersion());
        doc.put("generator", "bkspark.tools.VectorGen");
        doc.put("protobuf_runtime", Pb.lightProto() ? "lightproto" : "protobuf-java");
        doc.put("keys", keys());
        doc.put("entries", entries());
        doc.put("lac_blobs", lacBlobs());
        doc.put("v2", v2());
        doc.put("v3", v3());
        doc.put("availability_of_entries", availability());
        doc.put("ledger_metadata", ledgerMetadata());
        doc.put("service_info", serviceInfo());
        doc.put("legacy_service_info", legacyServiceInfo());
        doc.put("cookies", cookies());
        doc.put("cookie_texts", cookieTexts());
        doc.put("layouts", layouts());
        doc.put("bookie_ids", bookieIds());
        doc.put("ledger_paths", ledgerPaths());
        String text = Json.pretty(doc) + "\n";
        if (args.length == 2 && args[0].equals("--out")) {
            java.nio.file.Files.write(java.nio.file.Paths.get(args[1]), text.getBytes(StandardCharsets.UTF_8));
        } else if (args.length == 0) {
            System.out.print(text);
            System.out.flush();
        } else {
            System.err.println("usage: VectorGen [--out FILE]");
            System.exit(2);
        }
    }
}
