"""Word count with Quix Streams, configured for exactly-once as its
documentation recommends: processing_guarantee="exactly-once",
commit_interval=1, RocksDB state (the default). One process is one
consumer; run several in the same consumer group for parallelism.

Args: bootstrap input output consumer_group state_dir
"""
import json
import sys

from quixstreams import Application


def main() -> None:
    bootstrap, input_topic, output_topic, group, state_dir = sys.argv[1:6]
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        processing_guarantee="exactly-once",
        commit_interval=1,
        auto_offset_reset="earliest",
        state_dir=state_dir,
    )
    words_in = app.topic(input_topic, value_deserializer="string")
    counts_out = app.topic(output_topic, value_serializer="string", key_serializer="string")
    sdf = app.dataframe(words_in)
    sdf = sdf.apply(lambda line: [w.lower() for w in line.split()], expand=True)
    sdf = sdf.group_by(lambda word: word, name="word")

    def count(word: str, state) -> str:
        n = state.get("count", 0) + 1
        state.set("count", n)
        return json.dumps({"key": word, "count": n}, separators=(",", ":"))

    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(counts_out)
    app.run()


if __name__ == "__main__":
    main()
