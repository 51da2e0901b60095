package org.tubespark.interop;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * produce NAMESRV TOPIC COUNT SIZE BATCH: sends COUNT messages ("j0", "j1", ... padded to SIZE bytes when
 * SIZE is larger) in batches of BATCH with key "k<i>" and tag "java"; prints one JSON line with the rate.
 * consume NAMESRV TOPIC COUNT TIMEOUT_MS [print]: reads every queue from its start until COUNT messages
 * arrived; prints each body (with "print") and one JSON summary line with the rate.
 */
public final class RocketMQTool {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce": produce(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                Integer.parseInt(args[5])); break;
            case "consume": consume(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]),
                args.length > 5 && args[5].equals("print")); break;
            default: throw new IllegalArgumentException("unknown command " + args[0]);
        }
        System.exit(0);
    }

    private static byte[] body(int i, int size) {
        byte[] head = ("j" + i).getBytes(StandardCharsets.UTF_8);
        if (size <= head.length) {
            return head;
        }
        byte[] out = new byte[size];
        java.util.Arrays.fill(out, (byte) 'x');
        System.arraycopy(head, 0, out, 0, head.length);
        return out;
    }

    static void produce(String namesrv, String topic, int count, int size, int batch) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("tubespark_java_producer");
        producer.setNamesrvAddr(namesrv);
        producer.start();
        long start = System.nanoTime();
        List<Message> pending = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "java", "k" + i, body(i, size));
            pending.add(m);
            if (pending.size() == batch || i == count - 1) {
                SendResult result = batch == 1 ? producer.send(pending.get(0)) : producer.send(pending);
                if (result.getSendStatus() != SendStatus.SEND_OK) {
                    throw new IllegalStateException("send failed: " + result);
                }
                pending.clear();
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        producer.shutdown();
        System.out.println("{\"sent\":" + count + ",\"seconds\":" + seconds + "}");
    }

    static void consume(String namesrv, String topic, int count, long timeoutMs, boolean print) throws Exception {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer("tubespark_java_" + System.nanoTime());
        consumer.setNamesrvAddr(namesrv);
        consumer.setAutoCommit(false);
        consumer.setPullBatchSize(32);
        // The group is new, so it starts every queue at its first offset. No seekToBegin after assign():
        // it races with the pull tasks assign() starts, and under load a queue was read from its end
        // (messages missed) or read twice (duplicates).
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.start();
        Collection<MessageQueue> queues = consumer.fetchMessageQueues(topic);
        consumer.assign(queues);
        long start = System.nanoTime();
        long deadline = System.currentTimeMillis() + timeoutMs;
        int got = 0;
        StringBuilder out = new StringBuilder();
        while (got < count && System.currentTimeMillis() < deadline) {
            List<MessageExt> batch = consumer.poll(1000);
            for (MessageExt m : batch) {
                got++;
                if (print) {
                    out.append("{\"body\":\"").append(new String(m.getBody(), StandardCharsets.UTF_8))
                        .append("\",\"keys\":\"").append(m.getKeys() == null ? "" : m.getKeys())
                        .append("\",\"tags\":\"").append(m.getTags() == null ? "" : m.getTags())
                        .append("\",\"queue\":").append(m.getQueueId())
                        .append(",\"offset\":").append(m.getQueueOffset()).append("}\n");
                }
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        System.out.print(out);  // no consumer.shutdown(): the JVM exits right after, and shutdown can stall
        System.out.println("{\"received\":" + got + ",\"seconds\":" + seconds + "}");
    }
}
