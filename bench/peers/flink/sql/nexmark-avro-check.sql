-- The Nexmark tables in Flink's plain 'avro' format (SQL.md "Avro"), each
-- copied into a JSON topic, in one Flink SQL job (weirbench.FlinkSqlJob).
-- A template: sql/avro-check.sh replaces @PREFIX@ and @BOOTSTRAP@.
-- The input topics hold bare Avro bodies of bench/peers/avro/<table>.avsc
-- (bench/peers/avro_topics.py --plain): the schema Flink derives from these
-- columns with 'avro.timestamp_mapping.legacy' = 'false' (TIMESTAMP_LTZ(3) is
-- timestamp-millis then; the legacy mapping refuses TIMESTAMP_LTZ).
CREATE TABLE bid (
  auction BIGINT,
  bidder BIGINT,
  price BIGINT,
  channel STRING,
  url STRING,
  date_time TIMESTAMP_LTZ(3),
  extra STRING,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = '@PREFIX@-bid',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.group.id' = '@PREFIX@',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'avro',
  'avro.timestamp_mapping.legacy' = 'false'
);
CREATE TABLE person (
  id BIGINT,
  name STRING,
  email_address STRING,
  credit_card STRING,
  city STRING,
  state STRING,
  date_time TIMESTAMP_LTZ(3),
  extra STRING,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = '@PREFIX@-person',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.group.id' = '@PREFIX@',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'avro',
  'avro.timestamp_mapping.legacy' = 'false'
);
CREATE TABLE auction (
  id BIGINT,
  item_name STRING,
  description STRING,
  initial_bid BIGINT,
  reserve BIGINT,
  date_time TIMESTAMP_LTZ(3),
  expires TIMESTAMP_LTZ(3),
  seller BIGINT,
  category BIGINT,
  extra STRING,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = '@PREFIX@-auction',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.group.id' = '@PREFIX@',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'format' = 'avro',
  'avro.timestamp_mapping.legacy' = 'false'
);
CREATE TABLE q0 (
  auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP_LTZ(3), extra STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '@PREFIX@-q0',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.transaction.timeout.ms' = '600000',
  'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = '@PREFIX@-q0',
  'format' = 'json',
  'json.timestamp-format.standard' = 'ISO-8601'
);
CREATE TABLE person_copy (
  id BIGINT, name STRING, email_address STRING, credit_card STRING, city STRING, state STRING,
  date_time TIMESTAMP_LTZ(3), extra STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '@PREFIX@-person-copy',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.transaction.timeout.ms' = '600000',
  'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = '@PREFIX@-person-copy',
  'format' = 'json',
  'json.timestamp-format.standard' = 'ISO-8601'
);
CREATE TABLE auction_copy (
  id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, reserve BIGINT,
  date_time TIMESTAMP_LTZ(3), expires TIMESTAMP_LTZ(3), seller BIGINT, category BIGINT, extra STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '@PREFIX@-auction-copy',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.transaction.timeout.ms' = '600000',
  'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = '@PREFIX@-auction-copy',
  'format' = 'json',
  'json.timestamp-format.standard' = 'ISO-8601'
);
INSERT INTO q0 SELECT auction, bidder, price, date_time, extra FROM bid;
INSERT INTO person_copy SELECT id, name, email_address, credit_card, city, state, date_time, extra FROM person;
INSERT INTO auction_copy SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, extra FROM auction;
