package ingest;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;

import scala.Tuple5;

/**
 * The per Kafka partition summary of a batch's records, as an aggregate Spark computes while it writes them
 * (in {@code Dataset.observe}), so that the ledger record needs no second pass over the rows or the files.
 *
 * <p>Input: (topic, partition, offset, timestamp in microseconds, schema id), the last two nullable. Result: a
 * JSON array, one object per (topic, partition), sorted, with {@code first} and {@code last} offset,
 * {@code count}, {@code max_timestamp} (microseconds, null when no record had one) and {@code schema_ids}
 * (sorted). The buffer holds one entry per partition, whatever the number of records.
 */
public final class PartitionSummary
        extends Aggregator<Tuple5<String, Integer, Long, Long, Integer>, PartitionSummary.Buffer, String> {

    private static final long serialVersionUID = 1L;

    /** The aggregate as a function to register: {@code spark.udf().register(name, PartitionSummary.function())}. */
    public static UserDefinedFunction function() {
        Encoder<Tuple5<String, Integer, Long, Long, Integer>> input = Encoders.tuple(
                Encoders.STRING(), Encoders.INT(), Encoders.LONG(), Encoders.LONG(), Encoders.INT());
        return functions.udaf(new PartitionSummary(), input);
    }

    /** One partition's figures. */
    public static final class Span implements Serializable {
        private static final long serialVersionUID = 1L;
        final String topic;
        final int partition;
        long first = Long.MAX_VALUE;
        long last = Long.MIN_VALUE;
        long count;
        long maxTimestamp = Long.MIN_VALUE;
        boolean timestamped;
        final TreeSet<Integer> schemaIds = new TreeSet<>();

        Span(String topic, int partition) {
            this.topic = topic;
            this.partition = partition;
        }

        void merge(Span other) {
            first = Math.min(first, other.first);
            last = Math.max(last, other.last);
            count += other.count;
            if (other.timestamped) {
                maxTimestamp = timestamped ? Math.max(maxTimestamp, other.maxTimestamp) : other.maxTimestamp;
                timestamped = true;
            }
            schemaIds.addAll(other.schemaIds);
        }
    }

    /** The spans by topic, then partition; the last one used is kept at hand (rows come partition by partition). */
    public static final class Buffer implements Serializable {
        private static final long serialVersionUID = 1L;
        final HashMap<String, HashMap<Integer, Span>> spans = new HashMap<>();
        transient Span recent;

        Span span(String topic, int partition) {
            if (recent != null && recent.partition == partition && recent.topic.equals(topic)) {
                return recent;
            }
            recent = spans.computeIfAbsent(topic, t -> new HashMap<>())
                    .computeIfAbsent(partition, p -> new Span(topic, p));
            return recent;
        }
    }

    @Override
    public Buffer zero() {
        return new Buffer();
    }

    @Override
    public Buffer reduce(Buffer buffer, Tuple5<String, Integer, Long, Long, Integer> row) {
        Span span = buffer.span(row._1(), row._2());
        long offset = row._3();
        span.first = Math.min(span.first, offset);
        span.last = Math.max(span.last, offset);
        span.count++;
        Long timestamp = row._4();
        if (timestamp != null) {
            span.maxTimestamp = span.timestamped ? Math.max(span.maxTimestamp, timestamp) : timestamp;
            span.timestamped = true;
        }
        if (row._5() != null) {
            span.schemaIds.add(row._5());
        }
        return buffer;
    }

    @Override
    public Buffer merge(Buffer left, Buffer right) {
        for (Map<Integer, Span> partitions : right.spans.values()) {
            for (Span other : partitions.values()) {
                left.span(other.topic, other.partition).merge(other);
            }
        }
        return left;
    }

    @Override
    public String finish(Buffer buffer) {
        List<Span> all = new ArrayList<>();
        buffer.spans.values().forEach(partitions -> all.addAll(partitions.values()));
        all.sort((a, b) -> a.topic.equals(b.topic) ? Integer.compare(a.partition, b.partition)
                : a.topic.compareTo(b.topic));
        StringBuilder out = new StringBuilder("[");
        for (Span s : all) {
            if (out.length() > 1) {
                out.append(',');
            }
            out.append("{\"topic\":");
            quote(out, s.topic);
            out.append(",\"partition\":").append(s.partition)
                    .append(",\"first\":").append(s.first)
                    .append(",\"last\":").append(s.last)
                    .append(",\"count\":").append(s.count)
                    .append(",\"max_timestamp\":").append(s.timestamped ? Long.toString(s.maxTimestamp) : "null")
                    .append(",\"schema_ids\":[");
            String separator = "";
            for (Integer id : s.schemaIds) {
                out.append(separator).append(id);
                separator = ",";
            }
            out.append("]}");
        }
        return out.append(']').toString();
    }

    private static void quote(StringBuilder out, String text) {
        out.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        out.append('"');
    }

    @Override
    public Encoder<Buffer> bufferEncoder() {
        return Encoders.javaSerialization(Buffer.class);
    }

    @Override
    public Encoder<String> outputEncoder() {
        return Encoders.STRING();
    }
}
