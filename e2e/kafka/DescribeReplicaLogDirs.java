// Tells which log directory holds each replica, with the Java Admin client, as a user's program
// does: Admin.describeReplicaLogDirs(Collection<TopicPartitionReplica>).
//
// Run as a single-file source program (e2e.kafka_tools.JavaAdmin does):
//   java -cp 'LIBS/*' DescribeReplicaLogDirs.java --bootstrap-server HOST:PORT [--command-config FILE] \
//       TOPIC:PARTITION:BROKER...
// Prints one JSON line per replica: {"replica":"t:0:1","currentReplicaLogDir":"/d0",
// "currentReplicaOffsetLag":0,"futureReplicaLogDir":null,"futureReplicaOffsetLag":-1} (a directory
// is null where the broker has none); exits 1 with "Class: message" on stderr when the call failed,
// 2 on bad arguments.

import java.io.FileInputStream;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeReplicaLogDirsResult.ReplicaLogDirInfo;
import org.apache.kafka.common.TopicPartitionReplica;

public final class DescribeReplicaLogDirs {
    private DescribeReplicaLogDirs() {
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        List<TopicPartitionReplica> replicas = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--bootstrap-server") && i + 1 < args.length) {
                props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[++i]);
            } else if (args[i].equals("--command-config") && i + 1 < args.length) {
                try (InputStream in = new FileInputStream(args[++i])) {
                    props.load(in);
                }
            } else {
                replicas.add(replica(args[i]));
            }
        }
        if (!props.containsKey(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG) || replicas.isEmpty()) {
            usage("--bootstrap-server and at least one TOPIC:PARTITION:BROKER are required");
        }
        try (Admin admin = Admin.create(props)) {
            Map<TopicPartitionReplica, ReplicaLogDirInfo> infos;
            try {
                infos = admin.describeReplicaLogDirs(replicas).all().get();
            } catch (ExecutionException e) {
                Throwable cause = e.getCause() == null ? e : e.getCause();
                System.err.println(cause.getClass().getSimpleName() + ": " + cause.getMessage());
                System.exit(1);
                return;
            }
            for (TopicPartitionReplica replica : replicas) {
                ReplicaLogDirInfo info = infos.get(replica);
                System.out.println("{\"replica\":" + quote(name(replica))
                        + ",\"currentReplicaLogDir\":" + quote(info.getCurrentReplicaLogDir())
                        + ",\"currentReplicaOffsetLag\":" + info.getCurrentReplicaOffsetLag()
                        + ",\"futureReplicaLogDir\":" + quote(info.getFutureReplicaLogDir())
                        + ",\"futureReplicaOffsetLag\":" + info.getFutureReplicaOffsetLag() + "}");
            }
        }
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
        System.err.println("DescribeReplicaLogDirs: " + problem);
        System.err.println("usage: DescribeReplicaLogDirs --bootstrap-server HOST:PORT [--command-config FILE] "
                + "TOPIC:PARTITION:BROKER...");
        System.exit(2);
    }
}
