package weirbench;

import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.regex.Pattern;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
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
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Word count as Flink's documentation recommends for exactly-once: RocksDB
 * state backend, checkpoints every 1 s in exactly-once mode, KafkaSource,
 * KafkaSink with DeliveryGuarantee.EXACTLY_ONCE; in a local MiniCluster.
 *
 * Args: bootstrap input output group checkpoint.dir parallelism [restore-path]
 */
public final class FlinkWordCount {
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

        KafkaSource<String> source = KafkaSource.<String>builder()
            .setBootstrapServers(bootstrap)
            .setTopics(input)
            .setGroupId(group)
            .setStartingOffsets(OffsetsInitializer.earliest())
            .setValueOnlyDeserializer(new SimpleStringSchema())
            .setProperty("isolation.level", "read_committed")
            .build();
        KafkaSink<Tuple2<String, Long>> sink = KafkaSink.<Tuple2<String, Long>>builder()
            .setBootstrapServers(bootstrap)
            .setRecordSerializer(KafkaRecordSerializationSchema.<Tuple2<String, Long>>builder()
                .setTopic(output)
                .setKeySerializationSchema(new KeyBytes())
                .setValueSerializationSchema(new ValueJson())
                .build())
            .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .setTransactionalIdPrefix(group)
            .setProperty("transaction.timeout.ms", "600000")
            .build();

        Pattern whitespace = Pattern.compile("\\s+", Pattern.UNICODE_CHARACTER_CLASS);
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka")
            .flatMap((String line, Collector<String> out) -> {
                for (String w : whitespace.split(line)) {
                    if (!w.isEmpty()) out.collect(w.toLowerCase(Locale.ROOT));
                }
            })
            .returns(Types.STRING)
            .keyBy(w -> w)
            .process(new Count())
            .sinkTo(sink);
        env.execute("wordcount");
    }

    /** The word as the Kafka key. */
    static final class KeyBytes implements SerializationSchema<Tuple2<String, Long>> {
        @Override
        public byte[] serialize(Tuple2<String, Long> t) {
            return t.f0.getBytes(StandardCharsets.UTF_8);
        }
    }

    /** {"key":"w","count":n}, as weir writes it. */
    static final class ValueJson implements SerializationSchema<Tuple2<String, Long>> {
        @Override
        public byte[] serialize(Tuple2<String, Long> t) {
            return ("{\"key\":\"" + t.f0 + "\",\"count\":" + t.f1 + "}").getBytes(StandardCharsets.UTF_8);
        }
    }

    /** Counts per key in RocksDB-backed ValueState. */
    static final class Count extends KeyedProcessFunction<String, String, Tuple2<String, Long>> {
        private transient ValueState<Long> count;

        @Override
        public void open(OpenContext ctx) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
        }

        @Override
        public void processElement(String word, Context ctx, Collector<Tuple2<String, Long>> out) throws Exception {
            Long c = count.value();
            long n = c == null ? 1 : c + 1;
            count.update(n);
            out.collect(Tuple2.of(word, n));
        }
    }
}
