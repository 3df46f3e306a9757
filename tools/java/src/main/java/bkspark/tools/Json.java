package bkspark.tools;

import java.util.Iterator;
import java.util.List;
import java.util.Map;

/** A tiny JSON writer (maps keep their insertion order), so that the tools need no JSON library. */
final class Json {
    private Json() {
    }

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    static String hex(byte[] data) {
        char[] out = new char[data.length * 2];
        for (int i = 0; i < data.length; i++) {
            out[2 * i] = HEX[(data[i] >> 4) & 0xF];
            out[2 * i + 1] = HEX[data[i] & 0xF];
        }
        return new String(out);
    }

    static String write(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value, -1, 0);
        return sb.toString();
    }

    /** Pretty-printed with the given indent, one key per line (stable and diff-friendly). */
    static String pretty(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value, 1, 0);
        return sb.toString();
    }

    private static void newline(StringBuilder sb, int indent, int depth) {
        if (indent >= 0) {
            sb.append('\n');
            for (int i = 0; i < indent * depth; i++) {
                sb.append(' ');
            }
        }
    }

    private static boolean isScalarList(List<?> list) {
        for (Object o : list) {
            if (o instanceof Map || o instanceof List) {
                return false;
            }
        }
        return true;
    }

    private static void write(StringBuilder sb, Object value, int indent, int depth) {
        if (value == null) {
            sb.append("null");
        } else if (value instanceof String) {
            string(sb, (String) value);
        } else if (value instanceof Boolean || value instanceof Integer || value instanceof Long
                || value instanceof Short || value instanceof Byte) {
            sb.append(value.toString());
        } else if (value instanceof byte[]) {
            string(sb, hex((byte[]) value));
        } else if (value instanceof Map) {
            Map<?, ?> map = (Map<?, ?>) value;
            if (map.isEmpty()) {
                sb.append("{}");
                return;
            }
            sb.append('{');
            Iterator<? extends Map.Entry<?, ?>> it = map.entrySet().iterator();
            while (it.hasNext()) {
                Map.Entry<?, ?> e = it.next();
                newline(sb, indent, depth + 1);
                string(sb, String.valueOf(e.getKey()));
                sb.append(indent >= 0 ? ": " : ":");
                write(sb, e.getValue(), indent, depth + 1);
                if (it.hasNext()) {
                    sb.append(',');
                }
            }
            newline(sb, indent, depth);
            sb.append('}');
        } else if (value instanceof List) {
            List<?> list = (List<?>) value;
            if (list.isEmpty()) {
                sb.append("[]");
                return;
            }
            boolean inline = indent < 0 || isScalarList(list);
            sb.append('[');
            for (int i = 0; i < list.size(); i++) {
                if (!inline) {
                    newline(sb, indent, depth + 1);
                }
                write(sb, list.get(i), inline ? -1 : indent, depth + 1);
                if (i + 1 < list.size()) {
                    sb.append(inline && indent >= 0 ? ", " : ",");
                }
            }
            if (!inline) {
                newline(sb, indent, depth);
            }
            sb.append(']');
        } else {
            throw new IllegalArgumentException("cannot write " + value.getClass() + " as JSON");
        }
    }

    private static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    sb.append("\\\"");
                    break;
                case '\\':
                    sb.append("\\\\");
                    break;
                case '\n':
                    sb.append("\\n");
                    break;
                case '\r':
                    sb.append("\\r");
                    break;
                case '\t':
                    sb.append("\\t");
                    break;
                default:
                    if (c < 0x20 || c > 0x7e) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }
}
