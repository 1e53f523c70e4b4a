package weirbench;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.StatementSet;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.util.TimeUtils;

/**
 * Runs a Flink SQL script (Nexmark queries over Kafka, see SQL.md) in a local
 * MiniCluster, set up like {@link FlinkWindowedCount}: RocksDB (embedded,
 * incremental checkpoints), exactly-once checkpoints every --interval to
 * --checkpoints, retained on cancellation, optionally restored from --restore.
 *
 *   weirbench.FlinkSqlJob --sql FILE --checkpoints DIR [--parallelism 2]
 *                         [--interval 1s] [--restore PATH]
 *
 * FILE holds statements separated by a ';' at the end of a line; lines that
 * start with "--" are comments. "SET 'key' = 'value'" sets a table option;
 * INSERT statements all go into one StatementSet (one job), every other
 * statement (CREATE TABLE / VIEW / FUNCTION ...) runs at once. The session time
 * zone is UTC unless the script sets 'table.local-time-zone'. Prints
 * "flink-sql: job running" once the job is submitted, then runs until killed.
 */
public final class FlinkSqlJob {
    private static final Pattern SET =
        Pattern.compile("(?is)^SET\\s+'([^']+)'\\s*=\\s*'([^']*)'$");
    private static final Pattern INSERT = Pattern.compile("(?is)^(INSERT|EXECUTE\\s+INSERT)\\b.*");

    public static void main(String[] args) throws Exception {
        String sqlFile = null, chkDir = null, restore = null;
        int parallelism = 2;
        Duration interval = Duration.ofSeconds(1);
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (i + 1 >= args.length) usage("missing value for " + a);
            String v = args[++i];
            switch (a) {
                case "--sql": sqlFile = v; break;
                case "--checkpoints": chkDir = v; break;
                case "--parallelism": parallelism = Integer.parseInt(v); break;
                case "--interval": interval = TimeUtils.parseDuration(v); break;
                case "--restore": restore = v; break;
                default: usage("unknown argument " + a);
            }
        }
        if (sqlFile == null || chkDir == null) usage("--sql and --checkpoints are required");
        List<String> statements = split(Files.readString(Path.of(sqlFile), StandardCharsets.UTF_8));

        Configuration conf = new Configuration();
        conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY,
            Path.of(chkDir).toAbsolutePath().toUri().toString());
        conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
        conf.set(CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
            ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
        if (restore != null) {
            conf.set(StateRecoveryOptions.SAVEPOINT_PATH, restore);
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);
        env.enableCheckpointing(interval.toMillis(), CheckpointingMode.EXACTLY_ONCE);

        StreamTableEnvironment tEnv = StreamTableEnvironment.create(env,
            EnvironmentSettings.newInstance().inStreamingMode().build());
        tEnv.getConfig().set("table.local-time-zone", "UTC");
        StatementSet inserts = tEnv.createStatementSet();
        int n = 0;
        for (String stmt : statements) {
            Matcher set = SET.matcher(stmt);
            if (set.matches()) {
                tEnv.getConfig().set(set.group(1), set.group(2));
            } else if (INSERT.matcher(stmt).matches()) {
                inserts.addInsertSql(stmt);
                n++;
            } else {
                tEnv.executeSql(stmt);
            }
        }
        if (n == 0) usage(sqlFile + " has no INSERT statement");
        TableResult result = inserts.execute();
        String job = result.getJobClient().map(c -> c.getJobID().toString()).orElse("?");
        System.out.println("flink-sql: job " + job + ", " + n + " INSERT statements in one statement set");
        System.out.println("flink-sql: job running");
        System.out.flush();
        result.await();
    }

    /** Statements separated by ';' at the end of a line; "--" comment lines dropped. */
    static List<String> split(String script) {
        List<String> out = new ArrayList<>();
        StringBuilder cur = new StringBuilder();
        for (String line : script.split("\r?\n", -1)) {
            if (line.strip().startsWith("--")) continue;
            String t = line.stripTrailing();
            if (t.endsWith(";")) {
                cur.append(t, 0, t.length() - 1);
                add(out, cur);
            } else {
                cur.append(line).append('\n');
            }
        }
        add(out, cur);
        return out;
    }

    private static void add(List<String> out, StringBuilder cur) {
        String s = cur.toString().strip();
        if (!s.isEmpty()) out.add(s);
        cur.setLength(0);
    }

    private static void usage(String why) {
        System.err.println("flink-sql: " + why);
        System.err.println("usage: weirbench.FlinkSqlJob --sql FILE --checkpoints DIR"
            + " [--parallelism 2] [--interval 1s] [--restore PATH]");
        System.exit(2);
    }
}
