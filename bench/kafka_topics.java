// Creates the bench's Kafka topics before anything writes to them, and returns once every partition has a leader.
//
// Run with the broker's own classpath in Java's single-file source mode (bench/kafka.py:
// ``java -cp <kafka-server jars> bench/kafka_topics.java <bootstrap> <partitions> <timeout_s> <topic>...``).
// Why: the bench used to let the first write auto-create its topic, and twice in CI runs on a loaded machine
// one partition of such a topic took no write for the producer's whole 600 s delivery timeout. A topic made
// here, with its leaders checked, never depends on auto-creation racing the first batch.
// Exit 0: ready; 1: not ready in time (what is missing on stderr); 2: bad arguments.

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.TopicExistsException;

public class kafka_topics {
    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: kafka_topics <bootstrap> <partitions> <timeout_s> <topic>...");
            System.exit(2);
        }
        String bootstrap = args[0];
        int partitions = Integer.parseInt(args[1]);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[2]));
        List<String> names = List.of(args).subList(3, args.length);
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        try (Admin admin = Admin.create(props)) {
            List<NewTopic> wanted = new ArrayList<>();
            for (String name : names) {
                wanted.add(new NewTopic(name, partitions, (short) 1));
            }
            for (Map.Entry<String, org.apache.kafka.common.KafkaFuture<Void>> made :
                    admin.createTopics(wanted).values().entrySet()) {
                try {
                    made.getValue().get(30, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        throw e;
                    }
                }
            }
            String missing = "";
            while (System.nanoTime() < deadline) {
                missing = leaderless(admin, names, partitions);
                if (missing.isEmpty()) {
                    return;
                }
                Thread.sleep(200);
            }
            System.err.println("kafka topics not ready: " + missing);
            System.exit(1);
        }
    }

    /** The partitions of these topics with no leader yet (or missing), as text; empty when all are led. */
    private static String leaderless(Admin admin, List<String> names, int partitions) throws InterruptedException {
        StringBuilder out = new StringBuilder();
        Map<String, TopicDescription> found;
        try {
            found = admin.describeTopics(names).allTopicNames().get(30, TimeUnit.SECONDS);
        } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
            return "describeTopics failed: " + e;
        }
        for (String name : names) {
            TopicDescription topic = found.get(name);
            if (topic == null || topic.partitions().size() < partitions) {
                out.append(name).append(" (partitions missing) ");
                continue;
            }
            for (TopicPartitionInfo partition : topic.partitions()) {
                if (partition.leader() == null || partition.leader().isEmpty()) {
                    out.append(name).append('-').append(partition.partition()).append(' ');
                }
            }
        }
        return out.toString().trim();
    }
}
