package ingest;

import java.io.Serializable;
import java.util.ArrayList;

import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;

/**
 * The records of a batch that its Spark job did not write, brought to the driver as an aggregate Spark computes
 * while it writes the others (in {@code Dataset.observe}): the records the JVM decoder could not vouch for, which
 * the driver decodes in Python and adds to the same Delta transaction, so one bad record costs one record.
 *
 * <p>Input: one record as a JSON text (null for the records the job wrote, which are skipped). Result: a JSON array
 * of the texts, or null when they came to more than {@code limit} characters in all (the buffer then holds nothing
 * more, and the caller reads those records another way): a batch of mostly bad records never fills the driver.
 */
public final class PendingRecords extends Aggregator<String, PendingRecords.Buffer, String> {

    private static final long serialVersionUID = 1L;

    private final long limit;

    public PendingRecords(long limit) {
        this.limit = limit;
    }

    /** The aggregate as a function to register: {@code spark.udf().register(name, PendingRecords.function(n))}. */
    public static UserDefinedFunction function(long limit) {
        return functions.udaf(new PendingRecords(limit), Encoders.STRING());
    }

    /** The texts kept so far and their size; {@code overflow} once they would have passed the limit. */
    public static final class Buffer implements Serializable {
        private static final long serialVersionUID = 1L;
        final ArrayList<String> records = new ArrayList<>();
        long chars;
        boolean overflow;

        void overflowed() {
            overflow = true;
            records.clear();
            records.trimToSize();
            chars = 0;
        }
    }

    @Override
    public Buffer zero() {
        return new Buffer();
    }

    @Override
    public Buffer reduce(Buffer buffer, String record) {
        if (record == null || buffer.overflow) {
            return buffer;
        }
        if (buffer.chars + record.length() > limit) {
            buffer.overflowed();
        } else {
            buffer.records.add(record);
            buffer.chars += record.length();
        }
        return buffer;
    }

    @Override
    public Buffer merge(Buffer left, Buffer right) {
        if (left.overflow || right.overflow || left.chars + right.chars > limit) {
            left.overflowed();
        } else {
            left.records.addAll(right.records);
            left.chars += right.chars;
        }
        return left;
    }

    @Override
    public String finish(Buffer buffer) {
        if (buffer.overflow) {
            return null;
        }
        StringBuilder out = new StringBuilder((int) Math.min(Integer.MAX_VALUE - 16, buffer.chars + buffer.records.size() + 2));
        out.append('[');
        for (int i = 0; i < buffer.records.size(); i++) {
            if (i > 0) {
                out.append(',');
            }
            out.append(buffer.records.get(i));
        }
        return out.append(']').toString();
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
