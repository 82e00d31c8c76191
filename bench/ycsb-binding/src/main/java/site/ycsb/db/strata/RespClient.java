package site.ycsb.db.strata;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A minimal RESP2 client: requests as arrays of bulk strings, replies parsed into Java
 * values (String for simple strings, RespError for errors, Long, byte[] or null for bulk
 * strings, List for arrays). One connection, used by one YCSB client thread.
 */
final class RespClient implements AutoCloseable {
  /** An error reply ("-ERR ..."). */
  static final class RespError {
    final String message;

    RespError(String message) {
      this.message = message;
    }

    @Override
    public String toString() {
      return message;
    }
  }

  private final Socket socket;
  private final InputStream in;
  private final OutputStream out;

  RespClient(String host, int port) throws IOException {
    socket = new Socket(host, port);
    socket.setTcpNoDelay(true);
    in = new BufferedInputStream(socket.getInputStream(), 1 << 16);
    out = new BufferedOutputStream(socket.getOutputStream(), 1 << 16);
  }

  /** Send one request and read its reply. */
  Object call(List<byte[]> args) throws IOException {
    out.write(('*' + Integer.toString(args.size()) + "\r\n").getBytes(StandardCharsets.US_ASCII));
    for (byte[] a : args) {
      out.write(('$' + Integer.toString(a.length) + "\r\n").getBytes(StandardCharsets.US_ASCII));
      out.write(a);
      out.write('\r');
      out.write('\n');
    }
    out.flush();
    return readReply();
  }

  private String readLine() throws IOException {
    StringBuilder sb = new StringBuilder();
    int c;
    while ((c = in.read()) != -1) {
      if (c == '\r') {
        if (in.read() != '\n') {
          throw new IOException("protocol error: CR without LF");
        }
        return sb.toString();
      }
      sb.append((char) c);
    }
    throw new IOException("connection closed by the server");
  }

  private Object readReply() throws IOException {
    int type = in.read();
    if (type == -1) {
      throw new IOException("connection closed by the server");
    }
    String line = readLine();
    switch (type) {
      case '+':
        return line;
      case '-':
        return new RespError(line);
      case ':':
        return Long.parseLong(line);
      case '$': {
        int len = Integer.parseInt(line);
        if (len < 0) {
          return null;
        }
        byte[] data = in.readNBytes(len);
        if (data.length != len || in.read() != '\r' || in.read() != '\n') {
          throw new IOException("protocol error: short bulk string");
        }
        return data;
      }
      case '*': {
        int n = Integer.parseInt(line);
        if (n < 0) {
          return null;
        }
        List<Object> items = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
          items.add(readReply());
        }
        return items;
      }
      default:
        throw new IOException("protocol error: unknown reply type " + (char) type);
    }
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }
}
