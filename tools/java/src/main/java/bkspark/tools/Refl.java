package bkspark.tools;

import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.List;

/**
 * Small reflection helpers, so that one source file compiles against every BookKeeper release we test
 * (4.16 and 4.17 ship protobuf-java message classes; 4.18 ships LightProto ones with another API, and
 * some methods exist only from 4.17 on). Non-public members are reached with setAccessible: our tools
 * run on the class path (unnamed module), where that is allowed.
 */
final class Refl {
    private Refl() {
    }

    /** Raised when a class or method is missing from the BookKeeper version on the class path. */
    static final class Missing extends RuntimeException {
        Missing(String message) {
            super(message);
        }
    }

    static Class<?> cls(String name) {
        try {
            return Class.forName(name);
        } catch (ClassNotFoundException e) {
            throw new Missing("class " + name + " is not in this BookKeeper version");
        }
    }

    static boolean hasClass(String name) {
        try {
            Class.forName(name);
            return true;
        } catch (ClassNotFoundException e) {
            return false;
        }
    }

    private static boolean fits(Class<?>[] params, Object[] args) {
        if (params.length != args.length) {
            return false;
        }
        for (int i = 0; i < params.length; i++) {
            Class<?> p = params[i];
            Object a = args[i];
            if (a == null) {
                if (p.isPrimitive()) {
                    return false;
                }
                continue;
            }
            if (p.isPrimitive()) {
                if (!boxOf(p).isInstance(a)) {
                    return false;
                }
            } else if (!p.isInstance(a)) {
                return false;
            }
        }
        return true;
    }

    static Class<?> boxOf(Class<?> p) {
        if (p == long.class) {
            return Long.class;
        } else if (p == int.class) {
            return Integer.class;
        } else if (p == short.class) {
            return Short.class;
        } else if (p == byte.class) {
            return Byte.class;
        } else if (p == boolean.class) {
            return Boolean.class;
        } else if (p == double.class) {
            return Double.class;
        } else if (p == float.class) {
            return Float.class;
        } else if (p == char.class) {
            return Character.class;
        }
        return p;
    }

    static List<Method> methods(Class<?> c, String name) {
        List<Method> out = new ArrayList<>();
        for (Class<?> k = c; k != null; k = k.getSuperclass()) {
            for (Method m : k.getDeclaredMethods()) {
                if (m.getName().equals(name) && !m.isSynthetic()) {
                    out.add(m);
                }
            }
        }
        for (Method m : c.getMethods()) {
            if (m.getName().equals(name) && !out.contains(m)) {
                out.add(m);
            }
        }
        return out;
    }

    static boolean hasMethod(Class<?> c, String name) {
        return !methods(c, name).isEmpty();
    }

    static Method find(Class<?> c, String name, Object[] args, boolean wantStatic) {
        for (Method m : methods(c, name)) {
            if (Modifier.isStatic(m.getModifiers()) == wantStatic && fits(m.getParameterTypes(), args)) {
                m.setAccessible(true);
                return m;
            }
        }
        throw new Missing("no method " + c.getName() + "." + name + " for " + args.length
                + " argument(s) in this BookKeeper version");
    }

    static Object unwrap(InvocationTargetException e) throws Exception {
        Throwable t = e.getCause();
        if (t instanceof Exception) {
            throw (Exception) t;
        }
        if (t instanceof Error) {
            throw (Error) t;
        }
        throw e;
    }

    static Object call(Object target, String name, Object... args) throws Exception {
        Method m = find(target.getClass(), name, args, false);
        try {
            return m.invoke(target, args);
        } catch (InvocationTargetException e) {
            return unwrap(e);
        }
    }

    static Object callStatic(Class<?> c, String name, Object... args) throws Exception {
        Method m = find(c, name, args, true);
        try {
            return m.invoke(null, args);
        } catch (InvocationTargetException e) {
            return unwrap(e);
        }
    }

    static Object construct(Class<?> c, Object... args) throws Exception {
        for (Constructor<?> k : c.getDeclaredConstructors()) {
            if (!k.isSynthetic() && fits(k.getParameterTypes(), args)) {
                k.setAccessible(true);
                try {
                    return k.newInstance(args);
                } catch (InvocationTargetException e) {
                    return unwrap(e);
                }
            }
        }
        throw new Missing("no constructor " + c.getName() + " for " + args.length + " argument(s)");
    }

    /**
     * Constructs an encoder such as RequestEnDecoderV3: 4.16/4.17 take a protobuf ExtensionRegistry
     * (unused by encode; we pass a real empty registry), 4.18 takes nothing.
     */
    static Object constructCodec(String className) throws Exception {
        Class<?> c = cls(className);
        for (Constructor<?> k : c.getConstructors()) {
            if (k.getParameterCount() == 0) {
                return k.newInstance();
            }
        }
        Class<?> reg = cls("com.google.protobuf.ExtensionRegistry");
        Object registry = callStatic(reg, "newInstance");
        return construct(c, registry);
    }

    /** The value of a (possibly private) instance field. */
    static Object field(Object target, String name) throws Exception {
        for (Class<?> k = target.getClass(); k != null; k = k.getSuperclass()) {
            try {
                java.lang.reflect.Field f = k.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(target);
            } catch (NoSuchFieldException e) {
                // look in the superclass
            }
        }
        throw new Missing("no field " + name + " in " + target.getClass().getName());
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static Object enumValue(Class<?> enumType, String name) {
        return Enum.valueOf((Class) enumType, name);
    }
}
