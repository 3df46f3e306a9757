package bkspark.tools;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.buffer.UnpooledByteBufAllocator;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeSet;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.discover.BookieServiceInfo;
import org.apache.bookkeeper.meta.LedgerMetadataSerDe;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.proto.BookieProtoEncoding;

/**
 * Parses what bkspark writes with its wire extensions (docs/extensions.md) using the BookKeeper classes on the
 * class path, the way a Java bookie or client reads them: v3 request bodies through the bookie's
 * RequestEnDecoderV3, v3 response bodies through the client's ResponseEnDecoderV3 (protobuf-java in 4.16 and
 * 4.17, LightProto in 4.18), ledger metadata through LedgerMetadataSerDe, BookieServiceInfo through
 * ZKRegistrationClient. For each input it prints what Java made of it: the operation, the ledger id it would
 * act on, the field numbers it kept as unknown (protobuf-java only; LightProto drops them), the bytes it writes
 * back, or the exception.
 *
 * <p>Input on stdin, one item per line: {@code request NAME HEX}, {@code response NAME HEX} (a frame body, no
 * length prefix), {@code metadata NAME LEDGERID HEX}, {@code serviceinfo NAME BOOKIEID HEX}. Output: one JSON
 * document on stdout.
 *
 * <p>Usage: java -cp 'classes:lib/*' bkspark.tools.ExtensionParse &lt; items.txt
 */
public final class ExtensionParse {
    /** The sub-messages of Request/Response that carry a ledger id (BookkeeperProtocol.proto's names). */
    private static final String[] REQUEST_PARTS = {"readRequest", "addRequest", "writeLacRequest", "readLacRequest",
        "forceLedgerRequest", "getListOfEntriesOfLedgerRequest", "getBookieInfoRequest", "authRequest",
        "startTLSRequest"};
    private static final String[] RESPONSE_PARTS = {"readResponse", "addResponse", "writeLacResponse",
        "readLacResponse", "forceLedgerResponse", "getListOfEntriesOfLedgerResponse", "getBookieInfoResponse",
        "authResponse", "startTLSResponse"};

    private ExtensionParse() {
    }

    static String cap(String s) {
        return Character.toUpperCase(s.charAt(0)) + s.substring(1);
    }

    static byte[] unhex(String hex) {
        byte[] out = new byte[hex.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    /** The field numbers protobuf-java kept as unknown in a message, or null where the runtime keeps none. */
    static Object unknownFields(Object message) throws Exception {
        if (!Refl.hasMethod(message.getClass(), "getUnknownFields")) {
            return null;
        }
        Object set = Refl.call(message, "getUnknownFields");
        Map<?, ?> map = (Map<?, ?>) Refl.call(set, "asMap");
        return new ArrayList<Object>(new TreeSet<Object>((Collection<?>) map.keySet()));
    }

    static Map<String, Object> describeV3(Object message, String[] parts) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        Object header = Refl.call(message, "getHeader");
        out.put("operation", Refl.call(header, "getOperation").toString());
        out.put("txn_id", Refl.call(header, "getTxnId"));
        if (Refl.hasMethod(message.getClass(), "getStatus")) {
            out.put("status", Refl.call(message, "getStatus").toString());
        }
        out.put("unknown_fields", unknownFields(message));
        List<Object> present = new ArrayList<>();
        for (String part : parts) {
            String has = "has" + cap(part);
            if (!Refl.hasMethod(message.getClass(), has) || !(Boolean) Refl.call(message, has)) {
                continue;
            }
            Object sub = Refl.call(message, "get" + cap(part));
            Map<String, Object> d = new LinkedHashMap<>();
            d.put("part", part);
            if (Refl.hasMethod(sub.getClass(), "getLedgerId")) {
                d.put("ledger_id", Refl.call(sub, "getLedgerId"));
            }
            if (Refl.hasMethod(sub.getClass(), "getEntryId")) {
                d.put("entry_id", Refl.call(sub, "getEntryId"));
            }
            d.put("unknown_fields", unknownFields(sub));
            present.add(d);
        }
        out.put("parts", present);
        return out;
    }

    static Map<String, Object> frame(String codecClass, String[] parts, byte[] body) throws Exception {
        Object codec = Refl.constructCodec("org.apache.bookkeeper.proto.BookieProtoEncoding$" + codecClass);
        Object message = ((BookieProtoEncoding.EnDecoder) codec).decode(Unpooled.wrappedBuffer(body));
        Map<String, Object> out = describeV3(message, parts);
        Object encoded = ((BookieProtoEncoding.EnDecoder) codec).encode(message, UnpooledByteBufAllocator.DEFAULT);
        byte[] again = VectorGen.bytes(encoded);
        // The encoders prefix the frame length; what was read had none.
        ByteBuf buf = Unpooled.wrappedBuffer(again);
        int length = buf.readInt();
        byte[] reencoded = new byte[length];
        buf.readBytes(reencoded);
        out.put("reencoded", Json.hex(reencoded));
        return out;
    }

    static Map<String, Object> item(String[] fields) throws Exception {
        String kind = fields[0];
        switch (kind) {
            case "request":
                return frame("RequestEnDecoderV3", REQUEST_PARTS, unhex(fields[2]));
            case "response":
                return frame("ResponseEnDecoderV3", RESPONSE_PARTS, unhex(fields[2]));
            case "metadata": {
                LedgerMetadata md = new LedgerMetadataSerDe().parseConfig(unhex(fields[3]), Long.parseLong(fields[2]),
                        Optional.empty());
                return VectorGen.describeMetadata(md);
            }
            case "serviceinfo": {
                Class<?> client = Refl.cls("org.apache.bookkeeper.discover.ZKRegistrationClient");
                BookieServiceInfo info = (BookieServiceInfo) Refl.callStatic(client, "deserializeBookieServiceInfo",
                        BookieId.parse(fields[2]), unhex(fields[3]));
                return VectorGen.describeServiceInfo(info);
            }
            default:
                throw new IllegalArgumentException("unknown kind " + kind);
        }
    }

    public static void main(String[] args) throws Exception {
        List<Object> results = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            String[] fields = line.split("\\s+");
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("kind", fields[0]);
            r.put("name", fields[1]);
            try {
                r.put("ok", true);
                r.put("parsed", item(fields));
            } catch (Exception e) {
                r.put("ok", false);
                r.put("error", e.getClass().getName() + ": " + e.getMessage());
            }
            results.add(r);
        }
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("bookkeeper_version", VectorGen.bookkeeperVersion());
        doc.put("protobuf_runtime", Pb.lightProto() ? "lightproto" : "protobuf-java");
        doc.put("results", results);
        System.out.print(Json.pretty(doc) + "\n");
        System.out.flush();
    }
}
