package ingest;

import java.math.BigInteger;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.spark.sql.api.java.UDF1;

/**
 * Whether a Kafka value holds an Avro body that Spark's {@code from_avro} decodes to exactly what the project's
 * Python decoder (fastavro) gives, so the JVM's row can be trusted without a second decode.
 *
 * <p>One pass over the bytes, against the writer schema (the table's current schema: the caller only asks about
 * records whose header names it). True only when:
 * <ul>
 *   <li>the body is well formed and read to its last byte (nothing left over, nothing missing);
 *   <li>its encoding is the minimal one: shortest varints, one block per array or map, minimal decimal bytes
 *       (what {@code to_avro} would write back, so a record passes exactly when re-encoding it gives its length);
 *   <li>every string (map keys too) is valid UTF-8 as Python's strict decoder defines it (no surrogates, no
 *       overlong forms, nothing above U+10FFFF), and every uuid string is canonical (lowercase 8-4-4-4-12);
 *   <li>values are within what both decoders represent the same way: booleans are 0 or 1, enum and union
 *       indexes exist, decimals fit their precision, dates and timestamps lie in years 1 to 9999, times within
 *       a day, lengths and counts within Avro's Java limits.
 * </ul>
 * Everything else is left to Python, which is the authority on what is wrong with a record. The check is
 * conservative by design: false never loses a record, it only sends it down the slower path.
 */
public final class AvroBodyCheck implements UDF1<byte[], Boolean> {
    private static final long serialVersionUID = 1L;

    // Avro's Java decoder limits, the system properties the session factory sets from ingestion/limits.py (the
    // one declaration of the limits for both decode paths); Avro's own defaults when they are not set.
    private static final long MAX_LENGTH = Math.min(
        Long.getLong("org.apache.avro.limits.string.maxLength", Integer.MAX_VALUE - 8),
        Long.getLong("org.apache.avro.limits.bytes.maxLength", Integer.MAX_VALUE - 8));
    private static final long MAX_ITEMS = Long.getLong("org.apache.avro.limits.collectionItems.maxLength",
        Integer.MAX_VALUE - 8);

    // Python's datetime range, 0001-01-01 to 9999-12-31 (inclusive), relative to the Unix epoch.
    private static final long MIN_DAY = -719_162L;
    private static final long MAX_DAY = 2_932_896L;
    private static final long MIN_MILLIS = MIN_DAY * 86_400_000L;
    private static final long MAX_MILLIS = (MAX_DAY + 1) * 86_400_000L - 1;
    private static final long MIN_MICROS = MIN_MILLIS * 1000L;
    private static final long MAX_MICROS = MAX_MILLIS * 1000L + 999L;

    private final String schemaText;
    private final int offset;
    private transient Node root;

    /**
     * @param schemaText the Avro schema the bodies were written with
     * @param offset     bytes before the body (5 for the Confluent wire format, 0 for plain Avro)
     */
    public AvroBodyCheck(String schemaText, int offset) {
        this.schemaText = schemaText;
        this.offset = offset;
        this.root = compile(schemaText);  // fail on the driver, not in a task, when the schema does not parse
    }

    @Override
    public Boolean call(byte[] value) {
        if (value == null || value.length < offset) {
            return false;
        }
        if (root == null) {
            root = compile(schemaText);
        }
        Cursor in = new Cursor(value, offset);
        try {
            return root.read(in) && in.pos == value.length;
        } catch (Bad | StackOverflowError malformed) {
            return false;  // bytes ended early, a malformed varint, or nesting deeper than the thread's stack
        }
    }

    // --- reading ---------------------------------------------------------------------------------------------

    /** Thrown when the bytes end early or a varint is malformed; no stack trace, it is control flow. */
    private static final class Bad extends RuntimeException {
        private static final long serialVersionUID = 1L;
        static final Bad INSTANCE = new Bad();

        private Bad() {
            super(null, null, false, false);
        }
    }

    private static final class Cursor {
        final byte[] buf;
        int pos;

        Cursor(byte[] buf, int pos) {
            this.buf = buf;
            this.pos = pos;
        }

        /** A zigzag varint of at most `maxBytes` bytes, in its shortest form. */
        long varint(int maxBytes) {
            long raw = 0;
            int shift = 0;
            for (int i = 0; i < maxBytes; i++) {
                if (pos >= buf.length) {
                    throw Bad.INSTANCE;
                }
                int b = buf[pos++] & 0xff;
                raw |= (long) (b & 0x7f) << shift;
                if ((b & 0x80) == 0) {
                    if (b == 0 && i > 0) {
                        throw Bad.INSTANCE;  // a trailing zero group: not the shortest form
                    }
                    if (maxBytes == 5 && i == 4 && b > 0x0f) {
                        throw Bad.INSTANCE;  // more than 32 bits
                    }
                    if (maxBytes == 10 && i == 9 && b > 0x01) {
                        throw Bad.INSTANCE;  // more than 64 bits
                    }
                    return (raw >>> 1) ^ -(raw & 1);
                }
                shift += 7;
            }
            throw Bad.INSTANCE;
        }

        int readInt() {
            return (int) varint(5);
        }

        long readLong() {
            return varint(10);
        }

        /** A length (of bytes, a string, a block) within Avro's limits and the bytes left. */
        int length(long max) {
            long n = readLong();
            if (n < 0 || n > max || n > buf.length - pos) {
                throw Bad.INSTANCE;
            }
            return (int) n;
        }

        /** Skips a length-prefixed value (bytes, a string, a map key); where it starts. */
        int take(long max) {
            int n = length(max);
            int start = pos;
            pos += n;
            return start;
        }

        void skip(int n) {
            if (n > buf.length - pos) {
                throw Bad.INSTANCE;
            }
            pos += n;
        }
    }

    // --- the schema as a tree of readers -------------------------------------------------------------------

    private abstract static class Node {
        /** Reads one value; false when it is well formed but not one both decoders agree on. */
        abstract boolean read(Cursor in);
    }

    private static Node compile(String schemaText) {
        return build(new Schema.Parser().parse(schemaText), new IdentityHashMap<>());
    }

    private static Node build(Schema schema, Map<Schema, Node> built) {
        Node known = built.get(schema);
        if (known != null) {
            return known;
        }
        LogicalType logical = schema.getLogicalType();
        switch (schema.getType()) {
            case NULL:
                return new Node() {
                    boolean read(Cursor in) {
                        return true;
                    }
                };
            case BOOLEAN:
                return new Node() {
                    boolean read(Cursor in) {
                        in.skip(1);
                        int b = in.buf[in.pos - 1];
                        return b == 0 || b == 1;
                    }
                };
            case INT:
                return ranged(logical, true);
            case LONG:
                return ranged(logical, false);
            case FLOAT:
                return fixedSize(4);
            case DOUBLE:
                return fixedSize(8);
            case STRING:
                return logical instanceof LogicalTypes.Uuid ? new UuidNode() : new StringNode();
            case BYTES:
                if (logical instanceof LogicalTypes.Decimal) {
                    return new DecimalBytes(((LogicalTypes.Decimal) logical).getPrecision());
                }
                return new Node() {
                    boolean read(Cursor in) {
                        in.take(MAX_LENGTH);
                        return true;
                    }
                };
            case FIXED:
                if (logical instanceof LogicalTypes.Decimal) {
                    return new DecimalFixed(schema.getFixedSize(), ((LogicalTypes.Decimal) logical).getPrecision());
                }
                return fixedSize(schema.getFixedSize());
            case ENUM: {
                int symbols = schema.getEnumSymbols().size();
                return new Node() {
                    boolean read(Cursor in) {
                        int index = in.readInt();
                        return index >= 0 && index < symbols;
                    }
                };
            }
            case UNION: {
                List<Schema> types = schema.getTypes();
                Node[] branches = new Node[types.size()];
                UnionNode node = new UnionNode(branches);
                built.put(schema, node);
                for (int i = 0; i < branches.length; i++) {
                    branches[i] = build(types.get(i), built);
                }
                return node;
            }
            case ARRAY: {
                BlockNode node = new BlockNode(false);
                built.put(schema, node);
                node.item = build(schema.getElementType(), built);
                return node;
            }
            case MAP: {
                BlockNode node = new BlockNode(true);
                built.put(schema, node);
                node.item = build(schema.getValueType(), built);
                return node;
            }
            case RECORD: {
                List<Schema.Field> fields = schema.getFields();
                RecordNode node = new RecordNode(new Node[fields.size()]);
                built.put(schema, node);  // before the fields: a record may contain itself
                for (int i = 0; i < fields.size(); i++) {
                    node.fields[i] = build(fields.get(i).schema(), built);
                }
                return node;
            }
            default:
                throw new IllegalArgumentException("no check for Avro type " + schema.getType());
        }
    }

    private static Node fixedSize(int size) {
        return new Node() {
            boolean read(Cursor in) {
                in.skip(size);
                return true;
            }
        };
    }

    /** int or long, with the range its logical type has in Python (dates, times, timestamps). */
    private static Node ranged(LogicalType logical, boolean isInt) {
        long min = Long.MIN_VALUE;
        long max = Long.MAX_VALUE;
        String name = logical == null ? "" : logical.getName();
        switch (name) {
            case "date":
                min = MIN_DAY;
                max = MAX_DAY;
                break;
            case "time-millis":
                min = 0;
                max = 86_400_000L - 1;
                break;
            case "time-micros":
                min = 0;
                max = 86_400_000_000L - 1;
                break;
            case "timestamp-millis":
            case "local-timestamp-millis":
                min = MIN_MILLIS;
                max = MAX_MILLIS;
                break;
            case "timestamp-micros":
            case "local-timestamp-micros":
                min = MIN_MICROS;
                max = MAX_MICROS;
                break;
            default:
                break;
        }
        final long lo = min;
        final long hi = max;
        final boolean bounded = lo != Long.MIN_VALUE || hi != Long.MAX_VALUE;
        if (!bounded) {
            return isInt ? new Node() {
                boolean read(Cursor in) {
                    in.readInt();
                    return true;
                }
            } : new Node() {
                boolean read(Cursor in) {
                    in.readLong();
                    return true;
                }
            };
        }
        return new Node() {
            boolean read(Cursor in) {
                long v = isInt ? in.readInt() : in.readLong();
                return v >= lo && v <= hi;
            }
        };
    }

    private static final class StringNode extends Node {
        boolean read(Cursor in) {
            int start = in.take(MAX_LENGTH);
            return validUtf8(in.buf, start, in.pos);
        }
    }

    private static final class UuidNode extends Node {
        boolean read(Cursor in) {
            int start = in.take(MAX_LENGTH);
            return in.pos - start == 36 && canonicalUuid(in.buf, start);
        }
    }

    private static final class DecimalBytes extends Node {
        private final BigInteger limit;

        DecimalBytes(int precision) {
            this.limit = BigInteger.TEN.pow(precision);
        }

        boolean read(Cursor in) {
            int start = in.take(MAX_LENGTH);
            int n = in.pos - start;
            if (n == 0) {
                return false;  // Java's BigInteger refuses it; Python reads 0
            }
            if (n > 1) {
                int first = in.buf[start];
                int second = in.buf[start + 1];
                if ((first == 0 && second >= 0) || (first == -1 && second < 0)) {
                    return false;  // a redundant sign byte: not what to_avro writes
                }
            }
            return fits(in.buf, start, n, limit);
        }
    }

    private static final class DecimalFixed extends Node {
        private final int size;
        private final BigInteger limit;

        DecimalFixed(int size, int precision) {
            this.size = size;
            this.limit = BigInteger.TEN.pow(precision);
        }

        boolean read(Cursor in) {
            in.skip(size);
            return size == 0 || fits(in.buf, in.pos - size, size, limit);
        }
    }

    private static boolean fits(byte[] buf, int start, int n, BigInteger limit) {
        if (n <= 8) {  // the common case without allocating: a long holds it
            long v = buf[start];
            for (int i = 1; i < n; i++) {
                v = (v << 8) | (buf[start + i] & 0xff);
            }
            return limit.bitLength() > 63 || Math.abs(v) < limit.longValue() && v != Long.MIN_VALUE;
        }
        byte[] copy = new byte[n];
        System.arraycopy(buf, start, copy, 0, n);
        return new BigInteger(copy).abs().compareTo(limit) < 0;
    }

    private static final class UnionNode extends Node {
        private final Node[] branches;

        UnionNode(Node[] branches) {
            this.branches = branches;
        }

        boolean read(Cursor in) {
            int index = in.readInt();
            return index >= 0 && index < branches.length && branches[index].read(in);
        }
    }

    private static final class RecordNode extends Node {
        final Node[] fields;

        RecordNode(Node[] fields) {
            this.fields = fields;
        }

        boolean read(Cursor in) {
            for (Node field : fields) {
                if (!field.read(in)) {
                    return false;
                }
            }
            return true;
        }
    }

    /** An array or a map in one block (count, items, 0), or empty (0): the encoding to_avro writes. */
    private static final class BlockNode extends Node {
        private final boolean keyed;
        Node item;

        BlockNode(boolean keyed) {
            this.keyed = keyed;
        }

        boolean read(Cursor in) {
            long count = in.readLong();
            if (count == 0) {
                return true;
            }
            if (count < 0 || count > MAX_ITEMS) {
                return false;  // a block with its byte size, or too many items: left to Python
            }
            for (long i = 0; i < count; i++) {
                if (keyed) {
                    int start = in.take(MAX_LENGTH);
                    if (!validUtf8(in.buf, start, in.pos)) {
                        return false;
                    }
                }
                if (!item.read(in)) {
                    return false;
                }
            }
            return in.readLong() == 0;  // a second block: valid, but longer than to_avro's encoding
        }
    }

    // --- text ----------------------------------------------------------------------------------------------

    /**
     * Strict UTF-8 (RFC 3629, as Python's decoder): the well-formed sequences of Unicode's table 3-7, so no
     * overlong forms, no surrogates, nothing above U+10FFFF. The lead byte gives the length and the range of the
     * second byte; the other continuation bytes are 80..BF.
     */
    static boolean validUtf8(byte[] b, int from, int to) {
        int i = from;
        while (i < to) {
            int c = b[i] & 0xff;
            if (c < 0x80) {
                i++;
                continue;
            }
            int n;
            int lo = 0x80;
            int hi = 0xbf;
            if (c >= 0xc2 && c <= 0xdf) {
                n = 2;
            } else if (c >= 0xe0 && c <= 0xef) {
                n = 3;
                lo = c == 0xe0 ? 0xa0 : lo;  // shorter forms of E0 are overlong
                hi = c == 0xed ? 0x9f : hi;  // ED A0..BF are surrogates
            } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4;
                lo = c == 0xf0 ? 0x90 : lo;  // overlong
                hi = c == 0xf4 ? 0x8f : hi;  // above U+10FFFF
            } else {
                return false;  // a continuation byte, C0/C1 (overlong) or F5..FF
            }
            if (to - i < n) {
                return false;
            }
            int second = b[i + 1] & 0xff;
            if (second < lo || second > hi) {
                return false;
            }
            for (int k = 2; k < n; k++) {
                if (!cont(b[i + k])) {
                    return false;
                }
            }
            i += n;
        }
        return true;
    }

    private static boolean cont(byte b) {
        return (b & 0xc0) == 0x80;
    }

    /** Lowercase hex in the 8-4-4-4-12 layout, as Python's str(uuid.UUID(...)) writes it. */
    static boolean canonicalUuid(byte[] b, int from) {
        for (int i = 0; i < 36; i++) {
            int c = b[from + i];
            if (i == 8 || i == 13 || i == 18 || i == 23) {
                if (c != '-') {
                    return false;
                }
            } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
                return false;
            }
        }
        return true;
    }
}
