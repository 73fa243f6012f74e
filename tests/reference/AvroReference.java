import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.regex.Pattern;

import org.apache.avro.Conversions;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.Decoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.Encoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.io.ResolvingDecoder;
import org.apache.avro.util.Utf8;

/**
 * The test suite's reference decoder: Apache Avro's own Java reader (GenericDatumReader over a binary decoder),
 * plus the rules of the specification that it leaves unchecked, so that its verdict is the specification's.
 *
 * <p>Input lines: {@code S <schema json>} sets the schema; any other line is a hex body. Output, one line per
 * body: {@code OK <hex>} with the decoded value written back by Avro's GenericDatumWriter (so two decoders agree on
 * a value exactly when their re-encodings agree), or {@code REJECT <reason>}.
 *
 * <p>Added to Avro's reader: strict UTF-8 for strings and map keys, booleans 0 or 1, int and long varints without
 * bits beyond 32 and 64 (Avro's reader drops them), decimal values within their precision (and bytes decimals of at
 * least one byte), uuid strings in the 8-4-4-4-12 form, nothing after the value; and the ranges Spark's types can
 * hold (dates and timestamps in years 1 to 9999, times within a day).
 * Written back: decimals minimally (through Avro's DecimalConversion), NaNs canonically, uuids in lowercase.
 */
public final class AvroReference {
    private static final long MIN_DAY = -719_162L;
    private static final long MAX_DAY = 2_932_896L;
    private static final long MIN_MILLIS = MIN_DAY * 86_400_000L;
    private static final long MAX_MILLIS = (MAX_DAY + 1) * 86_400_000L - 1;
    private static final Pattern UUID = Pattern.compile(
        "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");

    /** The bytes of one body, remembering the last byte read (for booleans) and where reading stopped. */
    static final class Body extends InputStream {
        final byte[] buf;
        int pos;
        int last = -1;

        Body(byte[] buf) {
            this.buf = buf;
        }

        @Override
        public int read() {
            if (pos >= buf.length) {
                return -1;
            }
            last = buf[pos++] & 0xff;
            return last;
        }

        @Override
        public int read(byte[] b, int off, int len) {
            if (pos >= buf.length) {
                return -1;
            }
            int n = Math.min(len, buf.length - pos);
            System.arraycopy(buf, pos, b, off, n);
            pos += n;
            return n;
        }
    }

    static final class Reject extends RuntimeException {
        Reject(String message) {
            super(message);
        }
    }

    static final class StrictReader extends GenericDatumReader<Object> {
        Body body;

        StrictReader(Schema schema, GenericData model) {
            super(schema, schema, model);
        }

        @Override
        protected Object readWithoutConversion(Object old, Schema expected, ResolvingDecoder in) throws IOException {
            int start = body.pos;
            Object value = super.readWithoutConversion(old, expected, in);
            LogicalType logical = expected.getLogicalType();
            switch (expected.getType()) {
                case BOOLEAN:
                    if (body.last > 1) {
                        throw new Reject("boolean byte " + body.last);
                    }
                    break;
                case INT:
                case LONG:
                    checkVarint(body, start, expected.getType() == Schema.Type.INT);
                    checkRange(logical, ((Number) value).longValue());
                    break;
                case BYTES:
                    if (logical instanceof LogicalTypes.Decimal) {
                        ByteBuffer b = ((ByteBuffer) value).duplicate();
                        byte[] raw = new byte[b.remaining()];
                        b.get(raw);
                        checkDecimal(raw, (LogicalTypes.Decimal) logical);
                    }
                    break;
                case FIXED:
                    if (logical instanceof LogicalTypes.Decimal && expected.getFixedSize() > 0) {
                        checkDecimal(((GenericFixed) value).bytes(), (LogicalTypes.Decimal) logical);
                    }
                    break;
                default:
                    break;
            }
            return value;
        }

        @Override
        protected Object readString(Object old, Schema expected, Decoder in) throws IOException {
            return checkText(super.readString(old, expected, in),
                             expected.getLogicalType() instanceof LogicalTypes.Uuid);
        }

        @Override
        protected Object newArray(Object old, int size, Schema schema) {
            // Avro 1.12.0's primitive array for double items keeps floats (seen here: the double 2b8b3444b7285cc2
            // comes back as 00000040b7285cc2, its low mantissa bits gone); a plain list keeps the values.
            return new java.util.ArrayList<Object>(Math.min(Math.max(size, 0), 1024));
        }

        @Override
        protected Object newMap(Object old, int size) {
            return new java.util.LinkedHashMap<Object, Object>();  // entries in the body's order, as in Python
        }

        @Override
        protected Object readMapKey(Object old, Schema expected, Decoder in) throws IOException {
            return checkText(super.readMapKey(old, expected, in), false);
        }
    }

    static Object checkText(Object value, boolean uuid) {
        byte[] raw = value instanceof Utf8 ? ((Utf8) value).getBytes() : value.toString().getBytes();
        int length = value instanceof Utf8 ? ((Utf8) value).getByteLength() : raw.length;
        try {
            StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(raw, 0, length));
        } catch (CharacterCodingException e) {
            throw new Reject("string is not valid UTF-8");
        }
        if (uuid && !UUID.matcher(new String(raw, 0, length, StandardCharsets.UTF_8)).matches()) {
            throw new Reject("uuid not in the 8-4-4-4-12 form");
        }
        return value;
    }

    /** A varint of the most bytes its type allows carries no bits beyond the type's width (Avro's reader drops
     * them, which would change the value). */
    static void checkVarint(Body body, int start, boolean isInt) {
        int n = body.pos - start;
        int last = body.buf[body.pos - 1] & 0xff;
        if ((isInt && n == 5 && last > 0x0f) || (!isInt && n == 10 && last > 0x01)) {
            throw new Reject("varint overflows its type");
        }
    }

    static void checkRange(LogicalType logical, long v) {
        if (logical == null) {
            return;
        }
        long lo;
        long hi;
        switch (logical.getName()) {
            case "date":
                lo = MIN_DAY;
                hi = MAX_DAY;
                break;
            case "time-millis":
                lo = 0;
                hi = 86_400_000L - 1;
                break;
            case "time-micros":
                lo = 0;
                hi = 86_400_000_000L - 1;
                break;
            case "timestamp-millis":
            case "local-timestamp-millis":
                lo = MIN_MILLIS;
                hi = MAX_MILLIS;
                break;
            case "timestamp-micros":
            case "local-timestamp-micros":
                lo = MIN_MILLIS * 1000L;
                hi = MAX_MILLIS * 1000L + 999L;
                break;
            default:
                return;
        }
        if (v < lo || v > hi) {
            throw new Reject(logical.getName() + " out of range: " + v);
        }
    }

    static void checkDecimal(byte[] raw, LogicalTypes.Decimal decimal) {
        if (raw.length == 0) {
            throw new Reject("decimal without bytes");
        }
        if (new BigInteger(raw).abs().compareTo(BigInteger.TEN.pow(decimal.getPrecision())) >= 0) {
            throw new Reject("decimal exceeds its precision");
        }
    }

    /** Writes values back canonically: NaNs as Java's canonical NaN, uuid strings in lowercase. */
    static final class CanonicalWriter extends GenericDatumWriter<Object> {
        CanonicalWriter(Schema schema, GenericData model) {
            super(schema, model);
        }

        @Override
        protected void writeWithoutConversion(Schema schema, Object datum, Encoder out) throws IOException {
            if (schema.getType() == Schema.Type.FLOAT && Float.isNaN((Float) datum)) {
                out.writeFloat(Float.NaN);
            } else if (schema.getType() == Schema.Type.DOUBLE && Double.isNaN((Double) datum)) {
                out.writeDouble(Double.NaN);
            } else if (schema.getType() == Schema.Type.STRING && schema.getLogicalType() instanceof LogicalTypes.Uuid) {
                out.writeString(datum.toString().toLowerCase(java.util.Locale.ROOT));
            } else {
                super.writeWithoutConversion(schema, datum, out);
            }
        }
    }

    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        GenericData model = new GenericData();
        // Avro 1.12.1 (Spark 4.2) may read with its fast reader, which calls none of StrictReader's checks
        model.setFastReaderEnabled(false);
        model.addLogicalTypeConversion(new Conversions.DecimalConversion());
        StrictReader reader = null;
        CanonicalWriter writer = null;
        String line;
        while ((line = in.readLine()) != null) {
            if (line.startsWith("S ")) {
                Schema schema = new Schema.Parser().parse(line.substring(2));
                reader = new StrictReader(schema, model);
                writer = new CanonicalWriter(schema, model);
                continue;
            }
            Body body = new Body(hex(line));
            reader.body = body;
            try {
                Object value = reader.read(null, DecoderFactory.get().directBinaryDecoder(body, null));
                if (body.pos != body.buf.length) {
                    throw new Reject((body.buf.length - body.pos) + " bytes after the value");
                }
                ByteArrayOutputStream bytes = new ByteArrayOutputStream();
                BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(bytes, null);
                writer.write(value, encoder);
                encoder.flush();
                out.println("OK " + hex(bytes.toByteArray()));
            } catch (Exception | OutOfMemoryError | StackOverflowError e) {
                String message = String.valueOf(e.getMessage()).replace('\n', ' ');
                out.println("REJECT " + e.getClass().getSimpleName() + ": " + message);
            }
        }
        out.flush();
    }

    static byte[] hex(String text) {
        byte[] out = new byte[text.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    static String hex(byte[] bytes) {
        StringBuilder s = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            s.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
        }
        return s.toString();
    }
}
