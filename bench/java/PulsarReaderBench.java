// bench/pulsar_compare.py's Java side: Pulsar's own Java client reads a topic through the broker with a Reader
// from the earliest message, as a Java consumer of history would. Run as a single source file (java -cp <Pulsar's
// jars> PulsarReaderBench.java SERVICE_URL TOPIC MESSAGES); prints one JSON line: messages read and seconds taken
// from the Reader's creation to the last message (the JVM's start is not timed).
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Reader;

public class PulsarReaderBench {
    public static void main(String[] args) throws Exception {
        String serviceUrl = args[0];
        String topic = args[1];
        long expected = Long.parseLong(args[2]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(serviceUrl).build()) {
            long start = System.nanoTime();
            long count = 0;
            try (Reader<byte[]> reader = client.newReader().topic(topic).startMessageId(MessageId.earliest)
                    .receiverQueueSize(5000).create()) {
                while (count < expected) {
                    Message<byte[]> message = reader.readNext(30, TimeUnit.SECONDS);
                    if (message == null) {
                        break;
                    }
                    count++;
                }
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            System.out.println("{\"messages\": " + count + ", \"seconds\": " + seconds + "}");
        }
    }
}
