package ingest;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.InputStreamReader;
import java.io.Reader;
import java.math.BigDecimal;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * JSON values to rows (value.format jsonschema and json), for the records it can vouch for: the same rules as
 * the Python decoder (json_types: strict JSON, duplicate keys refused, every value of its schema's type, required
 * properties present, enums, bounds, lengths, formats). It returns null for anything it cannot vouch for (any
 * fault, and values whose Python reading it does not reproduce: integers beyond 64 bits, integral numbers with a
 * fraction part for an integer, strings with surrogates); such records go to the Python decoder, the authority on
 * what is wrong with a record.
 *
 * The schema arrives as the tree `json_types.Node.tree` builds: {"k": kind, "null": nullable, ...}.
 */
public final class JsonDecode implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;
    private static final Pattern DATE_TIME = Pattern.compile(
        "(\\d{4})-(0[1-9]|1[0-2])-(\\d{2})[Tt]([01]\\d|2[0-3]):([0-5]\\d):([0-5]\\d)(\\.\\d+)?"
        + "([Zz]|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)");
    private static final Pattern DATE = Pattern.compile("\\d{4}-\\d{2}-\\d{2}");
    private static final Pattern UUID = Pattern.compile(
        "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
    private static final long MIN_SECONDS = -62135596800L;  // 0001-01-01T00:00:00Z
    private static final long MAX_SECONDS = 253402300799L;  // 9999-12-31T23:59:59Z

    private final String treeJson;
    private final int header;
    private transient Node root;
    private transient JsonFactory factory;

    /** Thrown for anything the function does not vouch for. */
    private static final class Bad extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Bad() {
            super(null, null, false, false);
        }
    }

    /** One schema node, read once from the tree. */
    private static final class Node {
        String kind;
        boolean nullable;
        List<String> names = new ArrayList<>();
        Map<String, Integer> index = new HashMap<>();
        List<Node> props = new ArrayList<>();
        List<Boolean> required = new ArrayList<>();
        boolean closed;
        Node extra;
        Node items;
        Long min;
        Long max;
        String format;
        Set<String> values;
        List<String[]> bounds = new ArrayList<>();
    }

    public JsonDecode(String treeJson, int header) {
        this.treeJson = treeJson;
        this.header = header;
    }

    @Override
    public Row call(byte[] value) {
        if (value == null || value.length <= header) {
            return null;
        }
        if (root == null) {
            try {
                root = node(new ObjectMapper().readTree(treeJson));
            } catch (java.io.IOException e) {
                throw new IllegalArgumentException("JsonDecode: unreadable schema tree", e);
            }
            factory = JsonFactory.builder().enable(com.fasterxml.jackson.core.StreamReadFeature.STRICT_DUPLICATE_DETECTION)
                .build();
        }
        int start = header;
        if (value.length - start >= 3 && (value[start] & 0xff) == 0xEF && (value[start + 1] & 0xff) == 0xBB
            && (value[start + 2] & 0xff) == 0xBF) {
            return null;  // a BOM: Python's json refuses it
        }
        Reader reader = new InputStreamReader(new ByteArrayInputStream(value, start, value.length - start),
            StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT));
        try (JsonParser parser = factory.createParser(reader)) {
            JsonToken first = parser.nextToken();
            if (first != JsonToken.START_OBJECT) {
                return null;
            }
            Object row = read(parser, root, first);
            if (parser.nextToken() != null) {
                return null;  // trailing content
            }
            return (Row) row;
        } catch (java.io.IOException | RuntimeException e) {  // Bad, a parse error, an impossible date
            return null;
        }
    }

    private static Node node(JsonNode tree) {
        Node n = new Node();
        n.kind = tree.get("k").asText();
        n.nullable = tree.path("null").asBoolean(false);
        switch (n.kind) {
            case "object":
                for (JsonNode prop : tree.get("props")) {
                    n.index.put(prop.get("n").asText(), n.props.size());
                    n.names.add(prop.get("n").asText());
                    n.props.add(node(prop.get("t")));
                    n.required.add(prop.get("r").asBoolean());
                }
                n.closed = tree.path("closed").asBoolean(false);
                n.extra = tree.hasNonNull("extra") ? node(tree.get("extra")) : null;
                break;
            case "map":
                n.extra = node(tree.get("v"));
                break;
            case "array":
                n.items = node(tree.get("i"));
                n.min = tree.hasNonNull("min") ? tree.get("min").asLong() : null;
                n.max = tree.hasNonNull("max") ? tree.get("max").asLong() : null;
                break;
            case "string":
                n.min = tree.hasNonNull("min") ? tree.get("min").asLong() : null;
                n.max = tree.hasNonNull("max") ? tree.get("max").asLong() : null;
                n.format = tree.hasNonNull("format") ? tree.get("format").asText() : null;
                if (tree.hasNonNull("pattern")) {
                    throw new IllegalArgumentException("JsonDecode: patterns are checked in Python");
                }
                break;
            case "enum":
                n.values = new HashSet<>();
                for (JsonNode v : tree.get("values")) {
                    n.values.add(v.asText());
                }
                break;
            case "integer":
            case "number":
                for (JsonNode b : tree.get("bounds")) {
                    n.bounds.add(new String[] {b.get(0).asText(), b.get(1).asText(), b.get(2).asText()});
                }
                break;
            case "boolean":
                break;
            default:
                throw new IllegalArgumentException("JsonDecode: kind " + n.kind + " is decoded in Python");
        }
        return n;
    }

    private static Object read(JsonParser p, Node n, JsonToken token) throws java.io.IOException {
        if (token == JsonToken.VALUE_NULL) {
            if (n.nullable) {
                return null;
            }
            throw new Bad();
        }
        switch (n.kind) {
            case "object":
                return object(p, n, token);
            case "map": {
                if (token != JsonToken.START_OBJECT) {
                    throw new Bad();
                }
                Map<String, Object> out = new LinkedHashMap<>();
                for (JsonToken t = p.nextToken(); t != JsonToken.END_OBJECT; t = p.nextToken()) {
                    String key = text(p.currentName());
                    out.put(key, read(p, n.extra, p.nextToken()));
                }
                return out;
            }
            case "array": {
                if (token != JsonToken.START_ARRAY) {
                    throw new Bad();
                }
                List<Object> out = new ArrayList<>();
                for (JsonToken t = p.nextToken(); t != JsonToken.END_ARRAY; t = p.nextToken()) {
                    out.add(read(p, n.items, t));
                }
                count(out.size(), n);
                return out;
            }
            case "string":
                return string(p, n, token);
            case "enum": {
                if (token != JsonToken.VALUE_STRING || !n.values.contains(p.getText())) {
                    throw new Bad();
                }
                return p.getText();
            }
            case "integer": {
                if (token != JsonToken.VALUE_NUMBER_INT || p.getNumberType() == JsonParser.NumberType.BIG_INTEGER) {
                    throw new Bad();
                }
                long v = p.getLongValue();
                bounds(new BigDecimal(v), n);
                return v;
            }
            case "number": {
                if (token == JsonToken.VALUE_NUMBER_INT && p.getNumberType() != JsonParser.NumberType.BIG_INTEGER) {
                    long v = p.getLongValue();
                    bounds(new BigDecimal(v), n);
                    return (double) v;
                }
                if (token != JsonToken.VALUE_NUMBER_FLOAT) {
                    throw new Bad();
                }
                double v = p.getDoubleValue();
                if (Double.isInfinite(v) || Double.isNaN(v)) {
                    throw new Bad();
                }
                bounds(new BigDecimal(v), n);
                return v;
            }
            case "boolean":
                if (token == JsonToken.VALUE_TRUE) {
                    return Boolean.TRUE;
                }
                if (token == JsonToken.VALUE_FALSE) {
                    return Boolean.FALSE;
                }
                throw new Bad();
            default:
                throw new Bad();
        }
    }

    private static Row object(JsonParser p, Node n, JsonToken token) throws java.io.IOException {
        if (token != JsonToken.START_OBJECT) {
            throw new Bad();
        }
        Object[] values = new Object[n.props.size()];
        boolean[] seen = new boolean[values.length];
        for (JsonToken t = p.nextToken(); t != JsonToken.END_OBJECT; t = p.nextToken()) {
            String name = p.currentName();
            JsonToken valueToken = p.nextToken();
            Integer i = n.index.get(name);
            if (i != null) {
                values[i] = read(p, n.props.get(i), valueToken);
                seen[i] = true;
            } else if (n.closed) {
                throw new Bad();
            } else if (n.extra != null) {
                read(p, n.extra, valueToken);
            } else {
                p.skipChildren();
            }
        }
        for (int i = 0; i < values.length; i++) {
            if (!seen[i] && n.required.get(i)) {
                throw new Bad();
            }
        }
        return RowFactory.create(values);
    }

    private static String text(String s) {
        for (int i = 0; i < s.length(); i++) {
            if (Character.isSurrogate(s.charAt(i))) {
                throw new Bad();  // Python keeps a lone surrogate Arrow refuses; pairs are left to Python too
            }
        }
        return s;
    }

    private static Object string(JsonParser p, Node n, JsonToken token) throws java.io.IOException {
        if (token != JsonToken.VALUE_STRING) {
            throw new Bad();
        }
        String s = text(p.getText());
        count(s.length(), n);
        if (n.format == null) {
            return s;
        }
        switch (n.format) {
            case "date-time":
                return dateTime(s);
            case "date": {
                if (!DATE.matcher(s).matches()) {
                    throw new Bad();
                }
                int year = Integer.parseInt(s.substring(0, 4));
                if (year < 1) {
                    throw new Bad();
                }
                return LocalDate.of(year, Integer.parseInt(s.substring(5, 7)), Integer.parseInt(s.substring(8, 10)));
            }
            case "time":
                dateTime("1970-01-01T" + s);
                return s;
            case "uuid":
                if (!UUID.matcher(s).matches()) {
                    throw new Bad();
                }
                return s;
            default:
                throw new Bad();
        }
    }

    private static Instant dateTime(String s) {
        Matcher m = DATE_TIME.matcher(s);
        if (!m.matches()) {
            throw new Bad();
        }
        int year = Integer.parseInt(m.group(1));
        if (year < 1) {
            throw new Bad();
        }
        String fraction = m.group(7) == null ? "" : m.group(7).substring(1);
        String micros = (fraction.length() > 6 ? fraction.substring(0, 6) : fraction + "000000".substring(
            fraction.length()));
        String zone = m.group(8);
        int offset = 0;
        if (!zone.equalsIgnoreCase("Z")) {
            offset = (zone.charAt(0) == '+' ? 1 : -1) * (Integer.parseInt(zone.substring(1, 3)) * 3600
                + Integer.parseInt(zone.substring(4, 6)) * 60);
        }
        LocalDateTime local = LocalDateTime.of(year, Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)),
            Integer.parseInt(m.group(4)), Integer.parseInt(m.group(5)), Integer.parseInt(m.group(6)),
            Integer.parseInt(micros) * 1000);  // an impossible day throws DateTimeException: not vouched for
        long seconds = local.toEpochSecond(ZoneOffset.ofTotalSeconds(offset));
        if (seconds < MIN_SECONDS || seconds > MAX_SECONDS) {
            throw new Bad();
        }
        return Instant.ofEpochSecond(seconds, local.getNano());
    }

    private static void count(long size, Node n) {
        if ((n.min != null && size < n.min) || (n.max != null && size > n.max)) {
            throw new Bad();
        }
    }

    private static void bounds(BigDecimal v, Node n) {
        for (String[] b : n.bounds) {
            BigDecimal bound = b[2].equals("true") ? new BigDecimal(b[1]) : new BigDecimal(Double.parseDouble(b[1]));
            int c = v.compareTo(bound);
            boolean ok;
            switch (b[0]) {
                case "minimum": ok = c >= 0; break;
                case "maximum": ok = c <= 0; break;
                case "exclusiveMinimum": ok = c > 0; break;
                default: ok = c < 0; break;
            }
            if (!ok) {
                throw new Bad();
            }
        }
    }
}
