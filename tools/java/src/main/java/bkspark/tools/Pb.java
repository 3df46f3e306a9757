package bkspark.tools;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A version-neutral description of a BookKeeper protobuf message (BookkeeperProtocol.proto), turned into
 * the real message object of whatever BookKeeper is on the class path: protobuf-java builders in 4.16
 * and 4.17 (org.apache.bookkeeper.proto.BookkeeperProtocol$Request ...), LightProto mutable messages in
 * 4.18 (org.apache.bookkeeper.proto.Request ...). The field and enum names are the .proto names, which
 * both generators keep.
 */
final class Pb {
    /** An enum value, by its .proto name; the setter's parameter type says which enum. */
    static final class En {
        final String name;

        En(String name) {
            this.name = name;
        }
    }

    static En en(String name) {
        return new En(name);
    }

    final String type;
    /** {op, field, value}: op is "set" or "add". Kept in insertion order. */
    final List<Object[]> ops = new ArrayList<>();

    Pb(String type) {
        this.type = type;
    }

    static Pb of(String type) {
        return new Pb(type);
    }

    Pb set(String field, Object value) {
        ops.add(new Object[] {"set", field, value});
        return this;
    }

    Pb add(String field, Object value) {
        ops.add(new Object[] {"add", field, value});
        return this;
    }

    /** The field values as JSON-ready data (bytes as hex, enums as names, messages as nested maps). */
    Map<String, Object> describe() {
        Map<String, Object> out = new LinkedHashMap<>();
        for (Object[] op : ops) {
            String field = (String) op[1];
            Object v = describeValue(op[2]);
            if ("add".equals(op[0])) {
                @SuppressWarnings("unchecked")
                List<Object> list = (List<Object>) out.computeIfAbsent(field, k -> new ArrayList<>());
                list.add(v);
            } else {
                out.put(field, v);
            }
        }
        return out;
    }

    private static Object describeValue(Object v) {
        if (v instanceof Pb) {
            return ((Pb) v).describe();
        } else if (v instanceof En) {
            return ((En) v).name;
        } else if (v instanceof byte[]) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("hex", Json.hex((byte[]) v));
            return m;
        }
        return v;
    }

    static boolean lightProto() {
        return !Refl.hasClass("org.apache.bookkeeper.proto.BookkeeperProtocol");
    }

    static String cap(String s) {
        return Character.toUpperCase(s.charAt(0)) + s.substring(1);
    }

    /** The real message object for this BookKeeper version. */
    Object build() throws Exception {
        if (lightProto()) {
            Object msg = Refl.construct(Refl.cls("org.apache.bookkeeper.proto." + type));
            fillLight(msg, this);
            return msg;
        }
        return buildProtobufJava(this);
    }

    private static Object buildProtobufJava(Pb spec) throws Exception {
        Class<?> c = Refl.cls("org.apache.bookkeeper.proto.BookkeeperProtocol$" + spec.type.replace('.', '$'));
        Object builder = Refl.callStatic(c, "newBuilder");
        for (Object[] op : spec.ops) {
            String name = op[0] + cap((String) op[1]);
            Object value = op[2];
            Method chosen = null;
            Object arg = null;
            for (Method m : Refl.methods(builder.getClass(), name)) {
                if (m.getParameterCount() != 1) {
                    continue;
                }
                Class<?> p = m.getParameterTypes()[0];
                Object a = convertProtobufJava(p, value);
                if (a != null) {
                    chosen = m;
                    arg = a;
                    break;
                }
            }
            if (chosen == null) {
                throw new Refl.Missing("no setter " + name + " on " + builder.getClass().getName());
            }
            chosen.setAccessible(true);
            chosen.invoke(builder, arg);
        }
        return Refl.call(builder, "build");
    }

    private static Object convertProtobufJava(Class<?> p, Object value) throws Exception {
        if (value instanceof Pb) {
            Object built = buildProtobufJava((Pb) value);
            return p.isInstance(built) ? built : null;
        } else if (value instanceof En) {
            return p.isEnum() ? Refl.enumValue(p, ((En) value).name) : null;
        } else if (value instanceof byte[]) {
            if (p.getName().equals("com.google.protobuf.ByteString")) {
                return Refl.callStatic(p, "copyFrom", value);
            }
            return null;
        } else if (value != null && Refl.boxOf(p).isInstance(value)) {
            return value;
        }
        return null;
    }

    private static void fillLight(Object msg, Pb spec) throws Exception {
        for (Object[] op : spec.ops) {
            String name = op[0] + cap((String) op[1]);
            Object value = op[2];
            if (value instanceof Pb) {
                Object child = Refl.call(msg, name);
                fillLight(child, (Pb) value);
                continue;
            }
            Method chosen = null;
            Object arg = null;
            for (Method m : Refl.methods(msg.getClass(), name)) {
                if (m.getParameterCount() != 1) {
                    continue;
                }
                Class<?> p = m.getParameterTypes()[0];
                if (value instanceof En && p.isEnum()) {
                    arg = Refl.enumValue(p, ((En) value).name);
                } else if (value instanceof byte[] && p == byte[].class) {
                    arg = value;
                } else if (!(value instanceof En) && !(value instanceof byte[]) && value != null
                        && Refl.boxOf(p).isInstance(value)) {
                    arg = value;
                } else {
                    continue;
                }
                chosen = m;
                break;
            }
            if (chosen == null) {
                throw new Refl.Missing("no setter " + name + " on " + msg.getClass().getName());
            }
            chosen.setAccessible(true);
            chosen.invoke(msg, arg);
        }
    }
}
