import org.apache.flink.formats.avro.typeutils.AvroSchemaConverter;
import org.apache.flink.table.api.DataTypes;
import static org.apache.flink.table.api.DataTypes.*;
// Prints the Avro schema Flink 2.2 derives (AvroSchemaConverter, the avro
// format with avro.timestamp_mapping.legacy = false) from the Nexmark tables' DDL
// columns, one "table<TAB>schema" line each: bench/peers/avro/<table>.avsc must
// equal it (SQL.md "Avro"). Run: java -cp 'bench/peers/flink/target/dependency/*' bench/peers/avro/DeriveSchemas.java
public class DeriveSchemas { public static void main(String[] a) {
  var L = TIMESTAMP_LTZ(3);
  var person = ROW(FIELD("id", BIGINT()), FIELD("name", STRING()), FIELD("email_address", STRING()), FIELD("credit_card", STRING()),
     FIELD("city", STRING()), FIELD("state", STRING()), FIELD("date_time", L), FIELD("extra", STRING())).notNull();
  var auction = ROW(FIELD("id", BIGINT()), FIELD("item_name", STRING()), FIELD("description", STRING()), FIELD("initial_bid", BIGINT()),
     FIELD("reserve", BIGINT()), FIELD("date_time", L), FIELD("expires", L), FIELD("seller", BIGINT()), FIELD("category", BIGINT()), FIELD("extra", STRING())).notNull();
  var bid = ROW(FIELD("auction", BIGINT()), FIELD("bidder", BIGINT()), FIELD("price", BIGINT()), FIELD("channel", STRING()),
     FIELD("url", STRING()), FIELD("date_time", L), FIELD("extra", STRING())).notNull();
  System.out.println("person\t" + AvroSchemaConverter.convertToSchema(person.getLogicalType(), false));
  System.out.println("auction\t" + AvroSchemaConverter.convertToSchema(auction.getLogicalType(), false));
  System.out.println("bid\t" + AvroSchemaConverter.convertToSchema(bid.getLogicalType(), false));
}}
