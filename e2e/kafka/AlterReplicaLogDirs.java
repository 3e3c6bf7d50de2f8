// Moves replicas between a broker's log directories with the Java Admin client, as a user's program
// does: Admin.alterReplicaLogDirs(Map<TopicPartitionReplica, String>).
//
// Run as a single-file source program (e2e.kafka_tools.JavaAdmin does):
//   java -cp 'LIBS/*' AlterReplicaLogDirs.java --bootstrap-server HOST:PORT [--command-config FILE] \
//       TOPIC:PARTITION:BROKER=DIR...
// Prints one JSON line per replica: {"replica":"t:0:1","logDir":"/d1","error":null}; exits 1 when
// any replica failed (each failure also on stderr as "Class: message"), 2 on bad arguments.

import java.io.FileInputStream;
import java.io.InputStream;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartitionReplica;

public final class AlterReplicaLogDirs {
    private AlterReplicaLogDirs() {
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        Map<TopicPartitionReplica, String> moves = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--bootstrap-server") && i + 1 < args.length) {
                props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[++i]);
            } else if (args[i].equals("--command-config") && i + 1 < args.length) {
                try (InputStream in = new FileInputStream(args[++i])) {
                    props.load(in);
                }
            } else {
                int eq = args[i].indexOf('=');
                if (eq < 0) {
                    usage("not TOPIC:PARTITION:BROKER=DIR: " + args[i]);
                }
                moves.put(replica(args[i].substring(0, eq)), args[i].substring(eq + 1));
            }
        }
        if (!props.containsKey(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG) || moves.isEmpty()) {
            usage("--bootstrap-server and at least one TOPIC:PARTITION:BROKER=DIR are required");
        }
        int failed = 0;
        try (Admin admin = Admin.create(props)) {
            Map<TopicPartitionReplica, KafkaFuture<Void>> results = admin.alterReplicaLogDirs(moves).values();
            for (Map.Entry<TopicPartitionReplica, String> move : moves.entrySet()) {
                String error = null;
                try {
                    results.get(move.getKey()).get();
                } catch (ExecutionException e) {
                    Throwable cause = e.getCause() == null ? e : e.getCause();
                    error = cause.getClass().getSimpleName() + ": " + cause.getMessage();
                    System.err.println(error);
                    failed++;
                }
                System.out.println("{\"replica\":" + quote(name(move.getKey())) + ",\"logDir\":"
                        + quote(move.getValue()) + ",\"error\":" + quote(error) + "}");
            }
        }
        System.exit(failed == 0 ? 0 : 1);
    }

    static TopicPartitionReplica replica(String text) {
        String[] parts = text.split(":");
        if (parts.length != 3) {
            usage("not TOPIC:PARTITION:BROKER: " + text);
        }
        return new TopicPartitionReplica(parts[0], Integer.parseInt(parts[1]), Integer.parseInt(parts[2]));
    }

    static String name(TopicPartitionReplica replica) {
        return replica.topic() + ":" + replica.partition() + ":" + replica.brokerId();
    }

    static String quote(String text) {
        if (text == null) {
            return "null";
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    static void usage(String problem) {
        System.err.println("AlterReplicaLogDirs: " + problem);
        System.err.println("usage: AlterReplicaLogDirs --bootstrap-server HOST:PORT [--command-config FILE] "
                + "TOPIC:PARTITION:BROKER=DIR...");
        System.exit(2);
    }
}
