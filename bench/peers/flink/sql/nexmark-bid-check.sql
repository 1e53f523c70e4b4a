-- Nexmark q0, q1, q2, a 10 s tumbling count and q17 over weir's bid topic, in
-- one Flink SQL job (weirbench.FlinkSqlJob). A template: sql/check.sh replaces
-- @PREFIX@ (topic / group / transactional-id prefix) and @BOOTSTRAP@.
-- Output topics are exactly-once: read them with isolation.level=read_committed.
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
  'format' = 'json',
  'json.timestamp-format.standard' = 'ISO-8601'
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
CREATE TABLE q1 (
  auction BIGINT, bidder BIGINT, price DECIMAL(23, 3), date_time TIMESTAMP_LTZ(3), extra STRING
) WITH (
  'connector' = 'kafka',
  'topic' = '@PREFIX@-q1',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.transaction.timeout.ms' = '600000',
  'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = '@PREFIX@-q1',
  'format' = 'json',
  'json.timestamp-format.standard' = 'ISO-8601',
  'json.encode.decimal-as-plain-number' = 'true'
);
CREATE TABLE q2 (
  auction BIGINT, price BIGINT
) WITH (
  'connector' = 'kafka',
  'topic' = '@PREFIX@-q2',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.transaction.timeout.ms' = '600000',
  'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = '@PREFIX@-q2',
  'format' = 'json'
);
CREATE TABLE tumble10 (
  auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3), num BIGINT
) WITH (
  'connector' = 'kafka',
  'topic' = '@PREFIX@-tumble',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.transaction.timeout.ms' = '600000',
  'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = '@PREFIX@-tumble',
  'format' = 'json',
  'json.timestamp-format.standard' = 'ISO-8601'
);
CREATE TABLE q17 (
  auction BIGINT, `day` STRING, total_bids BIGINT, min_price BIGINT, max_price BIGINT, sum_price BIGINT,
  PRIMARY KEY (auction, `day`) NOT ENFORCED
) WITH (
  'connector' = 'upsert-kafka',
  'topic' = '@PREFIX@-q17',
  'properties.bootstrap.servers' = '@BOOTSTRAP@',
  'properties.transaction.timeout.ms' = '600000',
  'sink.delivery-guarantee' = 'exactly-once',
  'sink.transactional-id-prefix' = '@PREFIX@-q17',
  'key.format' = 'json',
  'value.format' = 'json'
);
INSERT INTO q0 SELECT auction, bidder, price, date_time, extra FROM bid;
INSERT INTO q1 SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid;
INSERT INTO q2 SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;
INSERT INTO tumble10 SELECT auction, window_start, window_end, COUNT(*) AS num
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end;
INSERT INTO q17 SELECT auction, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS `day`, COUNT(*) AS total_bids,
  MIN(price) AS min_price, MAX(price) AS max_price, SUM(price) AS sum_price
  FROM bid GROUP BY auction, DATE_FORMAT(date_time, 'yyyy-MM-dd');
