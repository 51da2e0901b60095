package org.tubespark.interop.inlong;

import org.apache.inlong.common.msg.InLongMsg;
import org.xerial.snappy.Snappy;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Base64;
import java.util.Iterator;
import java.util.List;

/**
 * Test vectors from, and a reader around, InLong's own {@code InLongMsg} (inlong-common 1.11.0).
 *
 * <pre>
 *   encode OUTDIR        write bundles of every version InLongMsg can write (v1..v4, with and without
 *                        compression, assorted attributes) as OUTDIR/NAME.bin; one JSON line per file
 *   parse FILE...        parse each file with InLongMsg.parseFrom and print one JSON line per file:
 *                        {"file","ok":true,"version","createtime","msgcnt","groups":[{"attr","records":[b64]}]}
 *                        or {"file","ok":false,"error"}
 * </pre>
 *
 * Run with -Dfile.encoding=UTF-8: InLongMsg decodes v3/v4 attributes with the default charset.
 */
public final class InLongMsgVectors {

    private static final long CREATE_TIME = 1700000000123L;
    private static final int DATA_TIME_S = 1700000000;

    private InLongMsgVectors() {
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        if (args.length >= 2 && args[0].equals("encode")) {
            encode(Paths.get(args[1]), out);
        } else if (args.length >= 1 && args[0].equals("parse")) {
            for (int i = 1; i < args.length; i++) {
                out.println(parse(Paths.get(args[i])));
            }
        } else {
            System.err.println("usage: encode OUTDIR | parse FILE...");
            System.exit(2);
        }
        out.flush();
    }

    // ------------------------------------------------------------------------------------ encode

    private static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static byte[] big(int n, int seed) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) {
            b[i] = (byte) ("tubespark-inlong-".charAt((i + seed) % 17) + (i / 97) % 3);
        }
        return b;
    }

    private static void write(Path dir, String name, byte[] data, PrintStream out) throws IOException {
        Files.write(dir.resolve(name + ".bin"), data);
        out.println("{\"name\":" + json(name) + ",\"file\":" + json(dir.resolve(name + ".bin").toString())
                + ",\"size\":" + data.length + "}");
    }

    private static void encode(Path dir, PrintStream out) throws IOException {
        Files.createDirectories(dir);
        String[] groupAttrs = {
                "a=1&dt=1700000000000&groupId=g&streamId=s",
                "k=\u0000\u00e9\ud83d\ude00&m=0",
                "",
                " x = y &z=",
        };
        for (int v = 1; v <= 3; v++) {
            for (boolean compress : new boolean[] {false, true}) {
                InLongMsg msg = InLongMsg.newInLongMsg(compress, v);
                if (v < 3) {
                    // interleaved groups, an empty record, a large record, a 4th group with odd spacing
                    msg.addMsg(groupAttrs[0], utf8("r1"));
                    msg.addMsg(groupAttrs[1], utf8("\u4f60\u597d"));
                    msg.addMsg(groupAttrs[0], new byte[0]);
                    msg.addMsg(groupAttrs[0], big(5000, v));
                    msg.addMsg(groupAttrs[2], utf8("no attributes"));
                    msg.addMsg(groupAttrs[3], utf8("spaced"));
                    for (int i = 0; i < 50; i++) {
                        msg.addMsg(groupAttrs[1], utf8("row-" + i));
                    }
                } else {
                    msg.addMsg("g=1&dt=1700000000000", v3Chunk(new String[] {"p=1"}, "one"));
                    msg.addMsg("g=1&dt=1700000000000",
                            v3Chunk(new String[] {"p=2&q=\u00fc", "p=3", "p=2&q=\u00fc"}, "three"));
                    msg.addMsg("g=2", v3Chunk(new String[] {"p=1", "dt=5"}, "other"));
                    msg.addMsg("g=1&dt=1700000000000", v3Chunk(new String[] {"p=9"}, "again"));
                }
                write(dir, "v" + v + (compress ? "-snappy" : "-plain"), msg.buildArray(CREATE_TIME), out);
            }
        }
        // v4: InLongMsg wraps a bin message (as DataProxy's CodecBinMsg builds it).
        List<byte[]> bodies = List.of(utf8("first"), big(3000, 4), utf8("third \u00e9"));
        String[] own = {"a=1", "a=2&b=x", "b=\u00fc"};
        writeV4(dir, "v4-numeric-plain", false, 0, 0, 12, 34, "m=0&node=n1", bodies, null, false, out);
        writeV4(dir, "v4-numeric-snappy", true, 0, 0, 12, 34, "m=0&node=n1", bodies, null, false, out);
        writeV4(dir, "v4-string-ids-own-attrs", true, 0x4 | 0x1, 0, 0, 0,
                "groupId=g1&streamId=s1&x=1", bodies, own, false, out);
        writeV4(dir, "v4-lf-presnappy-own-attrs", true, 0x20 | 0x1, 0, 7, 8, "m=0", bodies, own, true, out);
        writeV4(dir, "v4-no-common-attrs", false, 0x2, 0, 1, 2, "", bodies, null, false, out);
        writeV4(dir, "v4-empty-record", false, 0, 0, 1, 2, "m=0",
                List.of(new byte[0], utf8("x"), new byte[0]), null, false, out);
        writeV4(dir, "v4-own-overridden", false, 0x1, 0, 3, 4, "a=common",
                List.of(utf8("one"), utf8("two")), new String[] {"a=own&c=1", "cnt=99&dt=1"}, false, out);
    }

    private static ByteBuffer v3Chunk(String[] attrs, String prefix) throws IOException {
        ByteArrayOutputStream bos = new ByteArrayOutputStream();
        DataOutputStream dos = new DataOutputStream(bos);
        for (int i = 0; i < attrs.length; i++) {
            byte[] body = utf8(prefix + "-" + i);
            byte[] attr = utf8(attrs[i]);
            dos.writeInt(body.length);
            dos.write(body);
            dos.writeInt(attr.length);
            dos.write(attr);
        }
        return ByteBuffer.wrap(bos.toByteArray());
    }

    private static void writeV4(Path dir, String name, boolean compress, int ext, int uniq, int gid, int sid,
            String commonAttrs, List<byte[]> records, String[] ownAttrs, boolean preCompress, PrintStream out)
            throws IOException {
        ByteArrayOutputStream bodyOut = new ByteArrayOutputStream();
        DataOutputStream body = new DataOutputStream(bodyOut);
        for (int i = 0; i < records.size(); i++) {
            body.writeInt(records.get(i).length);
            body.write(records.get(i));
            if (ownAttrs != null) {
                byte[] a = utf8(ownAttrs[i]);
                body.writeInt(a.length);
                body.write(a);
            }
        }
        byte[] bodyBytes = bodyOut.toByteArray();
        int msgType = 7;
        if (preCompress) {
            bodyBytes = Snappy.compress(bodyBytes);
            msgType |= 1 << 5;
        }
        byte[] attr = utf8(commonAttrs);
        ByteArrayOutputStream binOut = new ByteArrayOutputStream();
        DataOutputStream bin = new DataOutputStream(binOut);
        bin.writeInt(25 + bodyBytes.length + 2 + attr.length + 2 - 4);
        bin.writeByte(msgType);
        bin.writeShort(gid);
        bin.writeShort(sid);
        bin.writeShort(ext);
        bin.writeInt(DATA_TIME_S);
        bin.writeShort(records.size());
        bin.writeInt(uniq);
        bin.writeInt(bodyBytes.length);
        bin.write(bodyBytes);
        bin.writeShort(attr.length);
        bin.write(attr);
        bin.writeShort(0xEE01);
        InLongMsg msg = InLongMsg.newInLongMsg(compress, 4);
        if (!msg.addMsg(binOut.toByteArray())) {
            throw new IllegalStateException("InLongMsg refused the bin message " + name);
        }
        write(dir, name, msg.buildArray(CREATE_TIME), out);
    }

    // ------------------------------------------------------------------------------------- parse

    private static String parse(Path file) {
        StringBuilder sb = new StringBuilder("{\"file\":").append(json(file.toString()));
        try {
            byte[] data = Files.readAllBytes(file);
            InLongMsg msg = InLongMsg.parseFrom(data);
            if (msg == null) {
                return sb.append(",\"ok\":false,\"error\":\"parseFrom returned null\"}").toString();
            }
            StringBuilder groups = new StringBuilder("[");
            boolean firstGroup = true;
            for (String attr : msg.getAttrs()) {
                groups.append(firstGroup ? "" : ",").append("{\"attr\":").append(json(attr)).append(",\"records\":[");
                firstGroup = false;
                Iterator<byte[]> it = msg.getIterator(attr);
                boolean first = true;
                while (it.hasNext()) {
                    byte[] rec = it.next();
                    if (rec == null) {
                        throw new IllegalStateException("iterator returned null");
                    }
                    groups.append(first ? "" : ",").append('"').append(Base64.getEncoder().encodeToString(rec))
                            .append('"');
                    first = false;
                }
                groups.append("]}");
            }
            groups.append("]");
            return sb.append(",\"ok\":true,\"version\":").append(msg.getVersion())
                    .append(",\"createtime\":").append(msg.getCreatetime())
                    .append(",\"msgcnt\":").append(msg.getMsgCnt())
                    .append(",\"groups\":").append(groups).append("}").toString();
        } catch (Throwable t) {  // the class is lax: damage surfaces as any exception, from anywhere
            return sb.append(",\"ok\":false,\"error\":").append(json(t.getClass().getName() + ": " + t.getMessage()))
                    .append("}").toString();
        }
    }

    private static String json(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
