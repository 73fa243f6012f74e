package ingest;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.google.protobuf.ByteString;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.Message;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * The JVM decoder of Protobuf values: a Confluent-framed body of one message, parsed with protobuf-java's
 * {@code DynamicMessage} from the version's descriptor set, as the Spark row the project's Python decoder
 * ({@code protobuf_types.converter}) gives for it, or null when the JVM cannot vouch for it.
 *
 * <p>The caller passes only values whose header is the table's schema id and message indexes, byte for byte. The
 * body is first walked as {@code protobuf_check.py} walks it (the same faults: varints cut short or longer than
 * 10 bytes, wire types 6 and 7, unmatched groups, lengths beyond the body, packed runs, field number 0, tags
 * beyond 32 bits, every string strict UTF-8, nesting deeper than 100), then parsed, then converted with the same
 * rules (uint64 as decimal, enums by name or the number as text, Timestamp in years 1 to 9999 at microseconds,
 * Duration's range, maps in key order by code point, wrappers as their value, Any as (type_url, value), a message
 * without fields as true). Null sends the record to Python, the authority on what is wrong with it: null never
 * loses a record. A strict decoder ({@code value.strict}) vouches for no body with an unknown field (a number the
 * message does not define, or a known number of another wire type): Python quarantines those.
 */
public final class ProtobufDecode implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;
    private static final int MAX_DEPTH = 100;
    private static final long MIN_SECONDS = -62_135_596_800L;
    private static final long MAX_SECONDS = 253_402_300_799L;
    private static final long MAX_DURATION_SECONDS = 315_576_000_000L;

    private final byte[] descriptorSet;
    private final String messageName;
    private final int offset;
    private final boolean strict;
    private transient Descriptor root;

    /**
     * @param descriptorSet a serialized FileDescriptorSet holding the message's file and its imports
     * @param messageName   the message's full name
     * @param offset        bytes before the body (the header: magic byte, schema id, message indexes)
     * @param strict        vouch for no body with an unknown field, at any depth
     */
    public ProtobufDecode(byte[] descriptorSet, String messageName, int offset, boolean strict) {
        this.descriptorSet = descriptorSet;
        this.messageName = messageName;
        this.offset = offset;
        this.strict = strict;
        this.root = compile(descriptorSet, messageName);  // fail on the driver when it does not build
    }

    public ProtobufDecode(byte[] descriptorSet, String messageName, int offset) {
        this(descriptorSet, messageName, offset, false);
    }

    static Descriptor compile(byte[] descriptorSet, String messageName) {
        try {
            Map<String, FileDescriptor> built = new HashMap<>();
            Descriptor found = null;
            for (FileDescriptorProto proto : FileDescriptorSet.parseFrom(descriptorSet).getFileList()) {
                List<FileDescriptor> deps = new ArrayList<>();
                for (String name : proto.getDependencyList()) {
                    deps.add(built.get(name));
                }
                FileDescriptor file = FileDescriptor.buildFrom(proto, deps.toArray(new FileDescriptor[0]));
                built.put(proto.getName(), file);
                for (Descriptor candidate : allMessages(file)) {
                    if (candidate.getFullName().equals(messageName)) {
                        found = candidate;
                    }
                }
            }
            if (found == null) {
                throw new IllegalArgumentException("no message " + messageName + " in the descriptor set");
            }
            return found;
        } catch (Exception e) {
            throw new IllegalArgumentException("descriptor set does not build: " + e, e);
        }
    }

    private static List<Descriptor> allMessages(FileDescriptor file) {
        List<Descriptor> out = new ArrayList<>();
        for (Descriptor d : file.getMessageTypes()) {
            collect(d, out);
        }
        return out;
    }

    private static void collect(Descriptor d, List<Descriptor> out) {
        out.add(d);
        for (Descriptor nested : d.getNestedTypes()) {
            collect(nested, out);
        }
    }

    @Override
    public Row call(byte[] value) {
        if (value == null || value.length < offset) {
            return null;
        }
        if (root == null) {
            root = compile(descriptorSet, messageName);
        }
        try {
            Walk walk = new Walk(value, strict);
            walk.message(offset, value.length, root, 0, -1);
            DynamicMessage message = DynamicMessage.parseFrom(root,
                ByteString.copyFrom(value, offset, value.length - offset));
            return row(message);
        } catch (RuntimeException | StackOverflowError | java.io.IOException unverified) {
            return null;
        }
    }

    // --- the walk (protobuf_check.py) ------------------------------------------------------------------------

    private static final class Bad extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Bad() {
            super(null, null, false, false);
        }
    }

    private static final class Walk {
        final byte[] data;
        final boolean strict;
        long varint;

        Walk(byte[] data, boolean strict) {
            this.data = data;
            this.strict = strict;
        }

        int varint(int pos, int end) {
            long result = 0;
            int shift = 0;
            for (int i = pos; i < Math.min(pos + 10, end); i++) {
                int b = data[i] & 0xFF;
                result |= (long) (b & 0x7F) << shift;
                if (b < 0x80) {
                    if ((i == pos + 9 && b > 1) || (i > pos && b == 0)) {
                        // bits beyond 64, or a longer encoding than needed: protobuf-java reads some of these
                        // otherwise than upb (a 10-byte varint ending in 0x00 gets bit 63 set): Python decides
                        throw new Bad();
                    }
                    varint = result;
                    return i + 1;
                }
                shift += 7;
            }
            throw new Bad();
        }

        int message(int pos, int end, Descriptor message, int depth, int group) {
            if (depth > MAX_DEPTH) {
                throw new Bad();
            }
            while (pos < end) {
                int start = pos;
                pos = varint(pos, end);
                long tag = varint;
                if (Long.compareUnsigned(tag, 0xFFFFFFFFL) > 0) {
                    throw new Bad();
                }
                int number = (int) (tag >>> 3);
                int wireType = (int) (tag & 7);
                if (number == 0 || wireType == 6 || wireType == 7) {
                    throw new Bad();
                }
                if (wireType == 4) {
                    if (group == number) {
                        return pos;
                    }
                    throw new Bad();
                }
                FieldDescriptor field = message == null ? null : message.findFieldByNumber(number);
                boolean known = field != null
                    && (wireType == expected(field) || (wireType == 2 && packable(field)));
                if (!known && message != null && message.getOptions().getMapEntry()) {
                    throw new Bad();  // upb leaves such an entry out of the map (kept as an unknown field): Python
                }
                if (!known && strict) {
                    throw new Bad();  // value.strict: Python names the field (UnknownFieldError)
                }
                if (!known) {
                    pos = skip(pos, end, wireType, number, depth);
                } else {
                    pos = field(pos, end, field, wireType, depth);
                }
            }
            if (group >= 0) {
                throw new Bad();
            }
            return pos;
        }

        int length(int pos, int end) {
            pos = varint(pos, end);
            if (Long.compareUnsigned(varint, end - pos) > 0) {
                throw new Bad();
            }
            return pos;
        }

        int field(int pos, int end, FieldDescriptor field, int wireType, int depth) {
            if (wireType == 0) {
                return varint(pos, end);
            }
            if (wireType == 1 || wireType == 5) {
                int size = wireType == 1 ? 8 : 4;
                if (end - pos < size) {
                    throw new Bad();
                }
                return pos + size;
            }
            if (wireType == 3) {
                return message(pos, end, field.getMessageType(), depth + 1, field.getNumber());
            }
            pos = length(pos, end);
            int stop = pos + (int) varint;
            FieldDescriptor.Type type = field.getType();
            if (type == FieldDescriptor.Type.MESSAGE || type == FieldDescriptor.Type.GROUP) {
                message(pos, stop, field.getMessageType(), depth + 1, -1);
            } else if (type == FieldDescriptor.Type.STRING) {
                try {
                    StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(data, pos, stop - pos));
                } catch (CharacterCodingException e) {
                    throw new Bad();
                }
            } else if (type != FieldDescriptor.Type.BYTES) {
                int kind = expected(field);
                if (kind == 0) {
                    int at = pos;
                    while (at < stop) {
                        at = varint(at, stop);
                    }
                } else if ((stop - pos) % (kind == 1 ? 8 : 4) != 0) {
                    throw new Bad();
                }
            }
            return stop;
        }

        int skip(int pos, int end, int wireType, int number, int depth) {
            if (wireType == 0) {
                return varint(pos, end);
            }
            if (wireType == 1 || wireType == 5) {
                int size = wireType == 1 ? 8 : 4;
                if (end - pos < size) {
                    throw new Bad();
                }
                return pos + size;
            }
            if (wireType == 2) {
                pos = length(pos, end);
                return pos + (int) varint;
            }
            return message(pos, end, null, depth + 1, number);
        }
    }

    private static int expected(FieldDescriptor field) {
        switch (field.getType()) {
            case INT32: case INT64: case UINT32: case UINT64: case SINT32: case SINT64: case BOOL: case ENUM:
                return 0;
            case FIXED64: case SFIXED64: case DOUBLE:
                return 1;
            case FIXED32: case SFIXED32: case FLOAT:
                return 5;
            case GROUP:
                return 3;
            default:
                return 2;
        }
    }

    private static boolean packable(FieldDescriptor field) {
        FieldDescriptor.Type t = field.getType();
        return field.isRepeated() && t != FieldDescriptor.Type.STRING && t != FieldDescriptor.Type.BYTES
            && t != FieldDescriptor.Type.MESSAGE && t != FieldDescriptor.Type.GROUP;
    }

    // --- the row (protobuf_types.converter) -----------------------------------------------------------------

    static Row row(Message message) {
        List<FieldDescriptor> fields = message.getDescriptorForType().getFields();
        Object[] values = new Object[fields.size()];
        for (int i = 0; i < values.length; i++) {
            FieldDescriptor field = fields.get(i);
            if (field.isMapField()) {
                values[i] = map(message, field);
            } else if (field.isRepeated()) {
                List<Object> items = new ArrayList<>();
                for (int j = 0; j < message.getRepeatedFieldCount(field); j++) {
                    items.add(single(field, message.getRepeatedField(field, j)));
                }
                values[i] = items;
            } else if (field.hasPresence() && !message.hasField(field)) {
                values[i] = null;
            } else {
                values[i] = single(field, message.getField(field));
            }
        }
        return RowFactory.create(values);
    }

    private static Map<Object, Object> map(Message message, FieldDescriptor field) {
        Descriptor entry = field.getMessageType();
        FieldDescriptor key = entry.findFieldByNumber(1);
        FieldDescriptor value = entry.findFieldByNumber(2);
        Map<Object, Object> out = new TreeMap<>(ProtobufDecode::compareKeys);
        for (int j = 0; j < message.getRepeatedFieldCount(field); j++) {
            Message item = (Message) message.getRepeatedField(field, j);
            out.put(single(key, item.getField(key)), single(value, item.getField(value)));  // the last one wins
        }
        return out;
    }

    private static int compareKeys(Object a, Object b) {
        if (a instanceof String) {  // by code point, as Python sorts
            return compareCodePoints((String) a, (String) b);
        }
        if (a instanceof BigDecimal) {
            return ((BigDecimal) a).compareTo((BigDecimal) b);
        }
        @SuppressWarnings("unchecked")
        Comparable<Object> left = (Comparable<Object>) a;
        return left.compareTo(b);
    }

    private static int compareCodePoints(String a, String b) {
        int i = 0;
        int j = 0;
        while (i < a.length() && j < b.length()) {
            int x = a.codePointAt(i);
            int y = b.codePointAt(j);
            if (x != y) {
                return Integer.compare(x, y);
            }
            i += Character.charCount(x);
            j += Character.charCount(y);
        }
        return Integer.compare(a.length() - i, b.length() - j);
    }

    private static Object single(FieldDescriptor field, Object value) {
        switch (field.getType()) {
            case UINT32: case FIXED32:
                return Integer.toUnsignedLong((Integer) value);
            case UINT64: case FIXED64:
                return new BigDecimal(new BigInteger(Long.toUnsignedString((Long) value)));
            case BYTES:
                return ((ByteString) value).toByteArray();
            case ENUM: {
                EnumValueDescriptor e = (EnumValueDescriptor) value;
                EnumValueDescriptor known = e.getType().findValueByNumber(e.getNumber());
                return known != null ? known.getName() : String.valueOf(e.getNumber());
            }
            case MESSAGE: case GROUP:
                return message(field.getMessageType(), (Message) value);
            default:
                return value;  // Integer, Long, Float, Double, Boolean, String
        }
    }

    private static Object message(Descriptor type, Message value) {
        String name = type.getFullName();
        if (name.startsWith("google.protobuf.") && name.endsWith("Value") && !name.equals("google.protobuf.Value")) {
            FieldDescriptor inner = type.findFieldByName("value");
            return single(inner, value.getField(inner));
        }
        if (name.equals("google.protobuf.Timestamp")) {
            long seconds = (Long) value.getField(type.findFieldByNumber(1));
            int nanos = (Integer) value.getField(type.findFieldByNumber(2));
            if (seconds < MIN_SECONDS || seconds > MAX_SECONDS || nanos < 0 || nanos > 999_999_999) {
                throw new Bad();
            }
            long micros = seconds * 1_000_000L + nanos / 1000;
            return Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L) * 1000L);
        }
        if (name.equals("google.protobuf.Duration")) {
            long seconds = (Long) value.getField(type.findFieldByNumber(1));
            int nanos = (Integer) value.getField(type.findFieldByNumber(2));
            if (Math.abs(seconds) > MAX_DURATION_SECONDS || Math.abs(nanos) > 999_999_999
                || (seconds != 0 && nanos != 0 && (seconds < 0) != (nanos < 0))) {
                throw new Bad();
            }
            return RowFactory.create(seconds, nanos);
        }
        if (name.equals("google.protobuf.Any")) {
            return RowFactory.create(value.getField(type.findFieldByNumber(1)),
                ((ByteString) value.getField(type.findFieldByNumber(2))).toByteArray());
        }
        if (type.getFields().isEmpty()) {
            return Boolean.TRUE;
        }
        return row(value);
    }
}
