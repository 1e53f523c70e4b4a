package weirbench;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Word count as Kafka Streams' documentation recommends for exactly-once:
 * exactly_once_v2, a 1 s commit interval, a RocksDB key-value store (the
 * default), one stream thread per unit of parallelism.
 *
 * Args: bootstrap input output application.id state.dir threads
 */
public final class KafkaStreamsWordCount {
    public static void main(String[] args) {
        String bootstrap = args[0], input = args[1], output = args[2], appId = args[3], stateDir = args[4];
        int threads = Integer.parseInt(args[5]);
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // The scale-out kill benchmark gives it the session timeout weir's
        // group has (-Dweirbench.session.timeout.ms=6000).
        String session = System.getProperty("weirbench.session.timeout.ms");
        if (session != null) {
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), Integer.parseInt(session));
        }

        Pattern whitespace = Pattern.compile("\\s+", Pattern.UNICODE_CHARACTER_CLASS);
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
            .flatMapValues(v -> {
                List<String> words = new ArrayList<>();
                for (String w : whitespace.split(v)) {
                    if (!w.isEmpty()) words.add(w.toLowerCase(Locale.ROOT));
                }
                return words;
            })
            .groupBy((k, w) -> w, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .mapValues((k, n) -> "{\"key\":\"" + k + "\",\"count\":" + n + "}")
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
    }
}
