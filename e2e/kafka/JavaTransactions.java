// Transactions as a Java application uses them, with kafka-clients' own producer and consumer:
// a transactional producer commits and aborts; read_committed and read_uncommitted consumers read
// the topic; a consume-transform-produce loop commits its group's offsets in the transaction
// (sendOffsetsToTransaction), and aborts one round; a zombie producer is fenced by a new one with
// the same transactional.id.
//
// Run as a single-file source program (tests/kafka_tools/test_java_transactions.py does):
//   java -cp 'LIBS/*' JavaTransactions.java --bootstrap-server HOST:PORT [--command-config FILE] PREFIX
// PREFIX names its topics (PREFIX-txn, -in, -out, -zombie), transactional ids and group. Prints one
// JSON object of what it saw (lists of record values, offsets, the zombie's exception class), the
// same for any broker that serves transactions as Kafka does; exits 1 with the exception on stderr
// when a step failed, 2 on bad arguments.

import java.io.FileInputStream;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class JavaTransactions {
    private static final Duration TIMEOUT = Duration.ofSeconds(60);

    private final Properties common;
    private final String prefix;
    private final Map<String, Object> result = new LinkedHashMap<>();

    private JavaTransactions(Properties common, String prefix) {
        this.common = common;
        this.prefix = prefix;
    }

    public static void main(String[] args) throws Exception {
        Properties common = new Properties();
        String prefix = null;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--bootstrap-server") && i + 1 < args.length) {
                common.put("bootstrap.servers", args[++i]);
            } else if (args[i].equals("--command-config") && i + 1 < args.length) {
                try (InputStream in = new FileInputStream(args[++i])) {
                    common.load(in);
                }
            } else {
                prefix = args[i];
            }
        }
        if (!common.containsKey("bootstrap.servers") || prefix == null) {
            System.err.println("usage: JavaTransactions --bootstrap-server HOST:PORT [--command-config FILE] PREFIX");
            System.exit(2);
        }
        JavaTransactions run = new JavaTransactions(common, prefix);
        try {
            run.createTopics();
            run.commitAndAbort();
            run.consumeTransformProduce();
            run.zombie();
        } catch (ExecutionException e) {
            throw e.getCause() instanceof Exception cause ? cause : e;
        }
        System.out.println(json(run.result));
    }

    private String topic(String name) {
        return prefix + "-" + name;
    }

    private void createTopics() throws Exception {
        try (Admin admin = Admin.create(common)) {
            List<NewTopic> topics = new ArrayList<>();
            topics.add(new NewTopic(topic("txn"), Optional.of(3), Optional.empty()));
            for (String name : List.of("in", "out", "zombie")) {
                topics.add(new NewTopic(topic(name), Optional.of(1), Optional.empty()));
            }
            admin.createTopics(topics).all().get();
        }
    }

    /** Commit c0-c2, abort a0-a2 (sent and flushed first), commit c3. */
    private void commitAndAbort() throws Exception {
        try (KafkaProducer<String, String> producer = transactional(prefix + "-producer")) {
            producer.initTransactions();
            transaction(producer, List.of("c0", "c1", "c2"), true);
            transaction(producer, List.of("a0", "a1", "a2"), false);
            transaction(producer, List.of("c3"), true);
        }
        result.put("read_committed", readAll(topic("txn"), "read_committed"));
        result.put("read_uncommitted", readAll(topic("txn"), "read_uncommitted"));
    }

    private void transaction(KafkaProducer<String, String> producer, List<String> values, boolean commit)
            throws Exception {
        producer.beginTransaction();
        int i = 0;
        for (String value : values) {
            producer.send(new ProducerRecord<>(topic("txn"), i++ % 3, null, value));
        }
        if (commit) {
            producer.commitTransaction();
        } else {
            producer.flush();
            producer.abortTransaction();
        }
    }

    /**
     * Records x0-x4 in `in`; a read_committed consumer in the group reads them, the transactional
     * producer writes them upper-cased to `out` and commits the group's offset in the transaction
     * (none committed before, 5 after); x5-x6 likewise but aborted (still 5, and `out` unchanged).
     */
    private void consumeTransformProduce() throws Exception {
        String group = prefix + "-group";
        TopicPartition in = new TopicPartition(topic("in"), 0);
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(producerProps())) {
            for (int i = 0; i < 7; i++) {
                plain.send(new ProducerRecord<>(in.topic(), 0, null, "x" + i)).get();
            }
        }
        Properties consumerProps = consumerProps("read_committed");
        consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5");
        List<Object> committedOffsets = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps);
                KafkaProducer<String, String> producer = transactional(prefix + "-ctp");
                Admin admin = Admin.create(common)) {
            producer.initTransactions();
            consumer.subscribe(List.of(in.topic()));
            for (boolean commit : new boolean[] {true, false}) {
                List<ConsumerRecord<String, String>> batch = new ArrayList<>();
                long deadline = System.nanoTime() + TIMEOUT.toNanos();
                int want = commit ? 5 : 2;
                while (batch.size() < want) {
                    if (System.nanoTime() > deadline) {
                        throw new IllegalStateException("only " + batch.size() + " records from " + in);
                    }
                    consumer.poll(Duration.ofMillis(200)).forEach(batch::add);
                }
                producer.beginTransaction();
                for (ConsumerRecord<String, String> record : batch) {
                    producer.send(new ProducerRecord<>(topic("out"), 0, null, record.value().toUpperCase()));
                }
                long next = batch.get(batch.size() - 1).offset() + 1;
                producer.sendOffsetsToTransaction(
                        Map.of(in, new OffsetAndMetadata(next)), consumer.groupMetadata());
                producer.flush();
                committedOffsets.add(committedOffset(admin, group, in));
                if (commit) {
                    producer.commitTransaction();
                    // The offset is the group's once the commit marker reaches its partition of
                    // __consumer_offsets, after commitTransaction returns.
                    long visibleBy = System.nanoTime() + TIMEOUT.toNanos();
                    while (!Long.valueOf(next).equals(committedOffset(admin, group, in))
                            && System.nanoTime() < visibleBy) {
                        Thread.sleep(100);
                    }
                } else {
                    producer.abortTransaction();
                }
                committedOffsets.add(committedOffset(admin, group, in));
            }
        }
        result.put("group_offset_before_and_after_each_end", committedOffsets);
        result.put("transformed", readAll(topic("out"), "read_committed"));
        result.put("transformed_uncommitted", readAll(topic("out"), "read_uncommitted"));
    }

    private static Object committedOffset(Admin admin, String group, TopicPartition partition) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        OffsetAndMetadata offset = offsets.get(partition);
        return offset == null ? null : offset.offset();
    }

    /**
     * A zombie: a producer mid-transaction (one record sent) when another with its transactional.id
     * initializes; its next send or commit fails, fenced. The new producer's transaction commits:
     * read_committed sees its record only.
     */
    private void zombie() throws Exception {
        String id = prefix + "-zombie";
        TopicPartition partition = new TopicPartition(topic("zombie"), 0);
        KafkaProducer<String, String> zombie = transactional(id);
        zombie.initTransactions();
        zombie.beginTransaction();
        zombie.send(new ProducerRecord<>(partition.topic(), 0, null, "zombie-0")).get();
        try (KafkaProducer<String, String> successor = transactional(id)) {
            successor.initTransactions();
            String fenced = "none";
            try {
                zombie.send(new ProducerRecord<>(partition.topic(), 0, null, "zombie-1")).get();
                zombie.commitTransaction();
            } catch (ExecutionException | KafkaException e) {
                Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
                fenced = cause.getClass().getSimpleName();
            } finally {
                zombie.close(Duration.ZERO);
            }
            result.put("zombie_fenced_by", fenced);
            successor.beginTransaction();
            successor.send(new ProducerRecord<>(partition.topic(), 0, null, "successor-0"));
            successor.commitTransaction();
        }
        result.put("zombie_topic_committed", readAll(partition.topic(), "read_committed"));
    }

    private Properties producerProps() {
        Properties props = new Properties();
        props.putAll(common);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return props;
    }

    private KafkaProducer<String, String> transactional(String transactionalId) {
        Properties props = producerProps();
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        return new KafkaProducer<>(props);
    }

    private Properties consumerProps(String isolation) {
        Properties props = new Properties();
        props.putAll(common);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        return props;
    }

    /** Every value the consumer reads, partition by partition, up to the end offsets it is given. */
    private List<String> readAll(String topicName, String isolation) {
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(isolation))) {
            List<TopicPartition> partitions = new ArrayList<>();
            consumer.partitionsFor(topicName, TIMEOUT)
                    .forEach(p -> partitions.add(new TopicPartition(topicName, p.partition())));
            partitions.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
            for (TopicPartition partition : partitions) {
                consumer.assign(List.of(partition));
                consumer.seekToBeginning(List.of(partition));
                long end = consumer.endOffsets(List.of(partition), TIMEOUT).get(partition);
                long deadline = System.nanoTime() + TIMEOUT.toNanos();
                while (consumer.position(partition, TIMEOUT) < end) {
                    if (System.nanoTime() > deadline) {
                        throw new IllegalStateException(partition + " not read up to " + end);
                    }
                    for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                        values.add(record.value());
                    }
                }
            }
        }
        return values;
    }

    static String json(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof Map<?, ?> map) {
            List<String> fields = new ArrayList<>();
            map.forEach((k, v) -> fields.add(json(String.valueOf(k)) + ":" + json(v)));
            return "{" + String.join(",", fields) + "}";
        }
        if (value instanceof List<?> list) {
            List<String> items = new ArrayList<>();
            list.forEach(v -> items.add(json(v)));
            return "[" + String.join(",", items) + "]";
        }
        if (value instanceof Number) {
            return value.toString();
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : value.toString().toCharArray()) {
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
}
