package weirbench;

import java.io.IOException;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Properties;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.ContextualProcessor;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.WindowStore;

/**
 * Windowed count as Kafka Streams' documentation recommends for exactly-once,
 * set up like {@link KafkaStreamsWordCount} (exactly_once_v2, 1 s commit
 * interval, RocksDB stores, one stream thread per unit of parallelism).
 *
 * Input: JSON events {"key":"k000123","ts":1764500000123,...}; event time is
 * "ts" (epoch ms, through a TimestampExtractor), the Kafka record key is
 * ignored: events are re-keyed by "key" and repartitioned. Tumbling 10 s
 * windows with 5 s grace (Kafka Streams has no watermark: a window closes
 * when stream time, the largest timestamp its task has seen, passes
 * window end + grace), emitted once on window close. Output: Kafka key = the
 * group key, value {"key":"k","window_start":"...Z","window_end":"...Z",
 * "count":n}, record timestamp = window_end - 1 ms. Records that are not such
 * JSON are skipped.
 *
 * Grace is 5 s, the out-of-orderness bound the other systems use, unless the
 * optional 7th argument says otherwise. It is not the same thing on a backlog:
 * after the repartition a task's stream time is the largest timestamp from
 * all input partitions, and Kafka Streams reads input partitions unevenly
 * (thousands of records of one partition at a time; one input task ran 20 s
 * of event time ahead of the others in our runs), so with 5 s grace a third
 * or more of the events of a pre-loaded input are dropped as late where
 * Flink's watermark (the minimum over partitions) drops none. Exact results
 * on a backlog need a grace of at least the event-time span the partitions
 * can drift apart (at most the input's span), and the events that close the
 * last windows must come after the rest of the input has been read
 * (bench/peers/windowed-check.py --no-flush, then --flush).
 *
 * Args: bootstrap input output application.id state.dir threads [grace-ms]
 */
public final class KafkaStreamsWindowedCount {
    static final Duration WINDOW = Duration.ofSeconds(10);
    static final Duration DEFAULT_GRACE = Duration.ofSeconds(5);

    public static void main(String[] args) {
        String bootstrap = args[0], input = args[1], output = args[2], appId = args[3], stateDir = args[4];
        int threads = Integer.parseInt(args[5]);
        Duration grace = args.length > 6 ? Duration.ofMillis(Long.parseLong(args[6])) : DEFAULT_GRACE;
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // onWindowClose checks for closed windows at most once per this many
        // wall-clock ms (internal config, default 1000), and only while
        // processing a record: with the default, windows that close on one of
        // the last records of the input can stay unemitted until more input
        // arrives. 0 = check on every record; the store is only scanned when
        // the close time has moved past a window end.
        p.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION, 0L);

        Serde<Event> events = Serdes.serdeFrom(new EventNoSer(), new EventJson());
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.ByteArray(), events).withTimestampExtractor(new EventTime()))
            // Re-key by the JSON key; only the timestamp travels on (it is the
            // repartition record's timestamp; the value is not needed for a count).
            .map((k, e) -> KeyValue.pair(e.key, e.ts))
            .groupByKey(Grouped.with("events", Serdes.String(), Serdes.Long()))
            .windowedBy(TimeWindows.ofSizeAndGrace(WINDOW, grace))
            .emitStrategy(EmitStrategy.onWindowClose())
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("counts")
                .withKeySerde(Serdes.String())
                .withValueSerde(Serdes.Long()))
            .toStream()
            .process(ToResult::new)
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
    }

    /** A parsed input event. */
    static final class Event {
        final String key;
        final long ts;

        Event(String key, long ts) {
            this.key = key;
            this.ts = ts;
        }
    }

    /** {"key":..,"ts":..} to an Event; null (skipped) for anything else. */
    static final class EventJson implements Deserializer<Event> {
        private static final JsonFactory JSON = new JsonFactory();

        @Override
        public Event deserialize(String topic, byte[] data) {
            if (data == null) return null;
            try (JsonParser p = JSON.createParser(data)) {
                if (p.nextToken() != JsonToken.START_OBJECT) return null;
                String key = null;
                long ts = 0;
                boolean hasTs = false;
                JsonToken t;
                while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
                    String field = p.currentName();
                    JsonToken v = p.nextToken();
                    if ("key".equals(field) && v == JsonToken.VALUE_STRING) {
                        key = p.getText();
                    } else if ("ts".equals(field) && v == JsonToken.VALUE_NUMBER_INT) {
                        ts = p.getLongValue();
                        hasTs = true;
                    } else {
                        p.skipChildren();
                    }
                }
                if (t != JsonToken.END_OBJECT || key == null || !hasTs) return null;
                return new Event(key, ts);
            } catch (IOException e) {
                return null;
            }
        }
    }

    /** Events are only read. */
    static final class EventNoSer implements Serializer<Event> {
        @Override
        public byte[] serialize(String topic, Event data) {
            throw new UnsupportedOperationException("input events are not written");
        }
    }

    /** Event time = "ts"; a negative result makes Kafka Streams skip the record. */
    static final class EventTime implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            return record.value() instanceof Event e ? e.ts : -1;
        }
    }

    /** Windowed count to (key, result JSON) at window_end - 1 ms. */
    static final class ToResult extends ContextualProcessor<Windowed<String>, Long, String, String> {
        private static final DateTimeFormatter RFC3339_MS =
            DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

        @Override
        public void process(Record<Windowed<String>, Long> r) {
            String key = r.key().key();
            long start = r.key().window().start(), end = r.key().window().end();
            String value = "{\"key\":" + quote(key)
                + ",\"window_start\":\"" + RFC3339_MS.format(Instant.ofEpochMilli(start))
                + "\",\"window_end\":\"" + RFC3339_MS.format(Instant.ofEpochMilli(end))
                + "\",\"count\":" + r.value() + "}";
            // The window store forwards the largest event time in the window;
            // the result is stamped with the window's last millisecond instead.
            context().forward(r.withKey(key).withValue(value).withTimestamp(end - 1));
        }
    }

    /** A JSON string literal. */
    static String quote(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
