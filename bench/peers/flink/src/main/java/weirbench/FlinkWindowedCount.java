package weirbench;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Windowed count as Flink's documentation recommends for exactly-once, set up
 * like {@link FlinkWordCount} (RocksDB, exactly-once checkpoints every 1 s,
 * KafkaSource read_committed, KafkaSink EXACTLY_ONCE, local MiniCluster).
 *
 * Input: JSON events {"key":"k000123","ts":1764500000123,...}; event time is
 * "ts" (epoch ms), the Kafka record key is ignored. Watermarks per partition
 * (KafkaSource splits), bounded out-of-orderness 5 s, idleness 30 s. Tumbling
 * 10 s event-time windows aligned to the epoch, default event-time trigger,
 * allowed lateness 0: one final count per (key, window) when the watermark
 * passes the window's end. Output: Kafka key = the group key, value
 * {"key":"k","window_start":"...Z","window_end":"...Z","count":n}, record
 * timestamp = window_end - 1 ms. Records that are not such JSON are skipped.
 *
 * Idleness: a partition that yields no record for 30 s of processing time
 * stops holding the watermark back. Reading a backlog this only matters if
 * one partition is starved that long while another is read up to events
 * far ahead (as windowed-check.py's flush events are); it did not happen in
 * our runs, where no event was dropped.
 *
 * Args: bootstrap input output group checkpoint.dir parallelism [restore-path]
 */
public final class FlinkWindowedCount {
    static final long WINDOW_MS = 10_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], input = args[1], output = args[2], group = args[3], chkDir = args[4];
        int parallelism = Integer.parseInt(args[5]);
        Configuration conf = new Configuration();
        conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "file://" + chkDir);
        conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
        conf.set(CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
                ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
        if (args.length > 6) {
            conf.set(StateRecoveryOptions.SAVEPOINT_PATH, args[6]);
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);
        env.enableCheckpointing(1000, CheckpointingMode.EXACTLY_ONCE);

        KafkaSource<Tuple2<String, Long>> source = KafkaSource.<Tuple2<String, Long>>builder()
            .setBootstrapServers(bootstrap)
            .setTopics(input)
            .setGroupId(group)
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setValueOnlyDeserializer(new EventJson())
            .setProperty("isolation.level", "read_committed")
            .build();
        KafkaSink<Tuple3<String, Long, Long>> sink = KafkaSink.<Tuple3<String, Long, Long>>builder()
            .setBootstrapServers(bootstrap)
            .setRecordSerializer(new ResultRecord(output))
            .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .setTransactionalIdPrefix(group)
            .setProperty("transaction.timeout.ms", "600000")
            .build();

        // Watermarks are generated per Kafka partition inside the source and
        // the minimum over partitions (and over channels after keyBy) is what
        // closes windows.
        WatermarkStrategy<Tuple2<String, Long>> watermarks = WatermarkStrategy
            .<Tuple2<String, Long>>forBoundedOutOfOrderness(Duration.ofSeconds(5))
            .withTimestampAssigner((event, recordTs) -> event.f1)
            .withIdleness(Duration.ofSeconds(30));

        env.fromSource(source, watermarks, "kafka")
            .keyBy(e -> e.f0)
            .window(TumblingEventTimeWindows.of(Duration.ofMillis(WINDOW_MS)))
            .aggregate(new Count(), new WithWindow())
            .sinkTo(sink);
        env.execute("windowed-count");
    }

    /** {"key":..,"ts":..} to (key, ts); anything else is skipped. */
    static final class EventJson implements DeserializationSchema<Tuple2<String, Long>> {
        private static final JsonFactory JSON = new JsonFactory();

        @Override
        public Tuple2<String, Long> deserialize(byte[] message) {
            if (message == null) return null;
            try (JsonParser p = JSON.createParser(message)) {
                if (p.nextToken() != JsonToken.START_OBJECT) return null;
                String key = null;
                Long ts = null;
                JsonToken t;
                while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
                    String field = p.currentName();
                    JsonToken v = p.nextToken();
                    if ("key".equals(field) && v == JsonToken.VALUE_STRING) {
                        key = p.getText();
                    } else if ("ts".equals(field) && v == JsonToken.VALUE_NUMBER_INT) {
                        ts = p.getLongValue();
                    } else {
                        p.skipChildren();
                    }
                }
                if (t != JsonToken.END_OBJECT || key == null || ts == null) return null;
                return Tuple2.of(key, ts);
            } catch (IOException e) {
                return null;
            }
        }

        @Override
        public void deserialize(byte[] message, Collector<Tuple2<String, Long>> out) {
            Tuple2<String, Long> e = deserialize(message);
            if (e != null) out.collect(e);
        }

        @Override
        public boolean isEndOfStream(Tuple2<String, Long> next) {
            return false;
        }

        @Override
        public TypeInformation<Tuple2<String, Long>> getProducedType() {
            return Types.TUPLE(Types.STRING, Types.LONG);
        }
    }

    /** Incremental count; only the running count is kept per (key, window). */
    static final class Count implements AggregateFunction<Tuple2<String, Long>, Long, Long> {
        @Override public Long createAccumulator() { return 0L; }
        @Override public Long add(Tuple2<String, Long> e, Long acc) { return acc + 1; }
        @Override public Long getResult(Long acc) { return acc; }
        @Override public Long merge(Long a, Long b) { return a + b; }
    }

    /** (key, window start, count) for the window that fired. */
    static final class WithWindow extends ProcessWindowFunction<Long, Tuple3<String, Long, Long>, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<Long> counts, Collector<Tuple3<String, Long, Long>> out) {
            out.collect(Tuple3.of(key, ctx.window().getStart(), counts.iterator().next()));
        }
    }

    /** Key = group key, value = result JSON, timestamp = window_end - 1 ms. */
    static final class ResultRecord implements KafkaRecordSerializationSchema<Tuple3<String, Long, Long>> {
        private static final DateTimeFormatter RFC3339_MS =
            DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);
        private final String topic;

        ResultRecord(String topic) {
            this.topic = topic;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(Tuple3<String, Long, Long> r, KafkaSinkContext ctx, Long timestamp) {
            long start = r.f1, end = start + WINDOW_MS;
            String value = "{\"key\":" + quote(r.f0)
                + ",\"window_start\":\"" + RFC3339_MS.format(Instant.ofEpochMilli(start))
                + "\",\"window_end\":\"" + RFC3339_MS.format(Instant.ofEpochMilli(end))
                + "\",\"count\":" + r.f2 + "}";
            return new ProducerRecord<>(topic, null, end - 1,
                r.f0.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
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
