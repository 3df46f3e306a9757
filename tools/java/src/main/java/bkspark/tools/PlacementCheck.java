package bkspark.tools;

import io.netty.util.HashedWheelTimer;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.Reader;
import java.lang.reflect.Constructor;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookiesHealthInfo;
import org.apache.bookkeeper.client.DistributionSchedule;
import org.apache.bookkeeper.client.EnsemblePlacementPolicy;
import org.apache.bookkeeper.client.RoundRobinDistributionSchedule;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.feature.SettableFeatureProvider;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.net.BookieSocketAddress;
import org.apache.bookkeeper.net.DNSToSwitchMapping;
import org.apache.bookkeeper.proto.BookieAddressResolver;
import org.apache.bookkeeper.stats.NullStatsLogger;

/**
 * Runs Apache BookKeeper's own placement policies over a scripted topology and prints one JSON object per
 * command, so the Python policies can be checked against the same inputs.
 *
 * <p>Usage: {@code PlacementCheck <commands-file | ->}. Lists are comma separated, {@code -} is empty.
 * <pre>
 * policy rackaware|regionaware         which Java policy to build
 * conf KEY VALUE                       a ClientConfiguration property
 * rack HOST /LOCATION                  a static table entry (HOST is the BookieId's host part)
 * local /LOCATION                      the location of this machine (the policy's "local node")
 * script                               use the ScriptBasedMapping from conf instead of the static table
 * init                                 initialize the policy
 * reset                                forget the policy, conf and table (the next topology follows)
 * cluster WRITABLE READONLY            onClusterChanged; prints the dead bookies
 * new E W A EXCLUDE                    newEnsemble; prints the ensemble and its adherence, or the error
 * replace E W A ENSEMBLE BOOKIE EXCLUDE replaceBookie
 * reorder ENSEMBLE WRITESET FAILURES   reorderReadSequence; FAILURES is bookie=lastFailedEntry,...
 * reorderlac ENSEMBLE WRITESET FAILURES reorderReadLACSequence
 * </pre>
 */
public final class PlacementCheck {
    private PlacementCheck() {
    }

    /** The static table mapping, looked up by host name (what BookKeeper passes when useHostName()). */
    static final class StaticMapping implements DNSToSwitchMapping {
        final Map<String, String> table = new HashMap<>();

        @Override
        public List<String> resolve(List<String> names) {
            List<String> out = new ArrayList<>(names.size());
            for (String n : names) {
                out.add(table.get(n));
            }
            return out;
        }

        @Override
        public void reloadCachedMappings() {
        }
    }

    private static List<String> list(String arg) {
        if (arg == null || arg.equals("-") || arg.isEmpty()) {
            return new ArrayList<>();
        }
        List<String> out = new ArrayList<>();
        for (String s : arg.split(",")) {
            if (!s.isEmpty()) {
                out.add(s);
            }
        }
        return out;
    }

    private static Set<BookieId> ids(String arg) {
        Set<BookieId> out = new HashSet<>();
        for (String s : list(arg)) {
            out.add(BookieId.parse(s));
        }
        return out;
    }

    private static List<BookieId> idList(String arg) {
        List<BookieId> out = new ArrayList<>();
        for (String s : list(arg)) {
            out.add(BookieId.parse(s));
        }
        return out;
    }

    private static List<String> names(Iterable<BookieId> bookies) {
        List<String> out = new ArrayList<>();
        for (BookieId b : bookies) {
            out.add(b.toString());
        }
        Collections.sort(out);
        return out;
    }

    private static List<String> ordered(List<BookieId> bookies) {
        List<String> out = new ArrayList<>();
        for (BookieId b : bookies) {
            out.add(b.toString());
        }
        return out;
    }

    private static DistributionSchedule.WriteSet writeSet(List<String> values, int ensembleSize) {
        DistributionSchedule.WriteSet ws =
                new RoundRobinDistributionSchedule(values.size(), 1, ensembleSize).getWriteSet(0);
        for (int i = 0; i < values.size(); i++) {
            ws.set(i, Integer.parseInt(values.get(i)));
        }
        return ws;
    }

    private static List<Integer> values(DistributionSchedule.WriteSet ws) {
        List<Integer> out = new ArrayList<>();
        for (int i = 0; i < ws.size(); i++) {
            out.add(ws.get(i));
        }
        return out;
    }

    private static BookiesHealthInfo health(String arg) {
        Map<BookieId, Long> failures = new HashMap<>();
        for (String item : list(arg)) {
            int eq = item.lastIndexOf('=');
            failures.put(BookieId.parse(item.substring(0, eq)), Long.parseLong(item.substring(eq + 1)));
        }
        return new BookiesHealthInfo() {
            @Override
            public long getBookieFailureHistory(BookieId bookie) {
                Long v = failures.get(bookie);
                return v == null ? -1L : v;
            }

            @Override
            public long getBookiePendingRequests(BookieId bookie) {
                return 0L;
            }
        };
    }

    private static EnsemblePlacementPolicy build(String name) throws Exception {
        String cls = name.equals("regionaware")
                ? "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"
                : "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy";
        Constructor<?> ctor = Class.forName(cls).getDeclaredConstructor();
        ctor.setAccessible(true);
        return (EnsemblePlacementPolicy) ctor.newInstance();
    }

    public static void main(String[] args) throws Exception {
        Reader in = args.length == 0 || args[0].equals("-")
                ? new InputStreamReader(System.in, StandardCharsets.UTF_8)
                : Files.newBufferedReader(Paths.get(args[0]), StandardCharsets.UTF_8);
        ClientConfiguration conf = new ClientConfiguration();
        StaticMapping mapping = new StaticMapping();
        boolean script = false;
        String policyName = "rackaware";
        EnsemblePlacementPolicy policy = null;
        HashedWheelTimer timer = null;
        BookieAddressResolver addressResolver = id -> {
            String text = id.toString();
            int colon = text.lastIndexOf(':');
            return new BookieSocketAddress(text.substring(0, colon), Integer.parseInt(text.substring(colon + 1)));
        };
        try (BufferedReader reader = new BufferedReader(in)) {
            String line;
            while ((line = reader.readLine()) != null) {
                line = line.trim();
                if (line.isEmpty() || line.startsWith("#")) {
                    continue;
                }
                String[] f = line.split("\\s+");
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("op", f[0]);
                try {
                    switch (f[0]) {
                        case "policy":
                            policyName = f[1];
                            continue;
                        case "reset":
                            if (policy != null) {
                                policy.uninitalize();
                                policy = null;
                            }
                            if (timer != null) {
                                timer.stop();
                                timer = null;
                            }
                            conf = new ClientConfiguration();
                            mapping.table.clear();
                            script = false;
                            continue;
                        case "conf":
                            conf.setProperty(f[1], f.length > 2 ? f[2] : "");
                            continue;
                        case "rack":
                            mapping.table.put(f[1], f[2]);
                            continue;
                        case "local":
                            mapping.table.put(InetAddress.getLocalHost().getHostAddress(), f[1]);
                            continue;
                        case "script":
                            script = true;
                            continue;
                        case "init":
                            policy = build(policyName);
                            timer = new HashedWheelTimer();
                            Optional<DNSToSwitchMapping> dns = script ? Optional.empty() : Optional.of(mapping);
                            policy.initialize(conf, dns, timer, SettableFeatureProvider.DISABLE_ALL,
                                    NullStatsLogger.INSTANCE, addressResolver);
                            break;
                        case "cluster":
                            out.put("dead", names(policy.onClusterChanged(ids(f[1]), ids(f.length > 2 ? f[2] : "-"))));
                            break;
                        case "new": {
                            EnsemblePlacementPolicy.PlacementResult<List<BookieId>> r = policy.newEnsemble(
                                    Integer.parseInt(f[1]), Integer.parseInt(f[2]), Integer.parseInt(f[3]),
                                    Collections.emptyMap(), ids(f.length > 4 ? f[4] : "-"));
                            out.put("ensemble", ordered(r.getResult()));
                            out.put("adherence", String.valueOf(r.getAdheringToPolicy()));
                            break;
                        }
                        case "replace": {
                            EnsemblePlacementPolicy.PlacementResult<BookieId> r = policy.replaceBookie(
                                    Integer.parseInt(f[1]), Integer.parseInt(f[2]), Integer.parseInt(f[3]),
                                    Collections.emptyMap(), idList(f[4]), BookieId.parse(f[5]),
                                    ids(f.length > 6 ? f[6] : "-"));
                            out.put("bookie", r.getResult().toString());
                            out.put("adherence", String.valueOf(r.getAdheringToPolicy()));
                            break;
                        }
                        case "reorder":
                        case "reorderlac": {
                            List<BookieId> ensemble = idList(f[1]);
                            DistributionSchedule.WriteSet ws = writeSet(list(f[2]), ensemble.size());
                            BookiesHealthInfo h = health(f.length > 3 ? f[3] : "-");
                            DistributionSchedule.WriteSet r = f[0].equals("reorder")
                                    ? policy.reorderReadSequence(ensemble, h, ws)
                                    : policy.reorderReadLACSequence(ensemble, h, ws);
                            out.put("order", values(r));
                            break;
                        }
                        default:
                            throw new IllegalArgumentException("unknown command " + f[0]);
                    }
                } catch (BKException e) {
                    out.put("error", e.getClass().getSimpleName());
                } catch (RuntimeException e) {
                    out.put("error", e.getClass().getSimpleName());
                    out.put("message", String.valueOf(e.getMessage()));
                }
                System.out.println(Json.write(out));
            }
        } finally {
            if (policy != null) {
                policy.uninitalize();
            }
            if (timer != null) {
                timer.stop();
            }
        }
        System.out.flush();
    }
}
