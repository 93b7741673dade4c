// Reads our checkpoints with Kafka's own MirrorMaker 2 client, as applications do on failover.
// Usage: java -cp 'KAFKA_LIBS/*' TranslateOffsets.java TARGET_BOOTSTRAP SOURCE_ALIAS GROUP...
// Prints one line per group and partition: GROUP TOPIC PARTITION OFFSET.
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public class TranslateOffsets {
    public static void main(String[] args) throws Exception {
        Map<String, Object> properties = new HashMap<>();
        properties.put("bootstrap.servers", args[0]);
        for (int i = 2; i < args.length; i++) {
            Map<TopicPartition, OffsetAndMetadata> offsets =
                RemoteClusterUtils.translateOffsets(properties, args[1], args[i], Duration.ofSeconds(30));
            for (Map.Entry<TopicPartition, OffsetAndMetadata> entry : offsets.entrySet()) {
                System.out.println(args[i] + " " + entry.getKey().topic() + " "
                    + entry.getKey().partition() + " " + entry.getValue().offset());
            }
        }
    }
}
