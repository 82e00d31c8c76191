package site.ycsb.db.strata;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;
import site.ycsb.ByteArrayByteIterator;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;

/**
 * YCSB binding for Redis-protocol servers: strata-kv (strata kv serve) and Redis alike.
 * A record is a hash: insert and update are HSET, read is HGETALL (or HMGET for some
 * fields), delete is DEL. Scans (workload E) are not supported: strata-kv is a hash table.
 *
 * <p>Properties: strata.host (default 127.0.0.1), strata.port (default 6380).
 */
public class StrataKvClient extends DB {
  private RespClient client;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    String host = p.getProperty("strata.host", "127.0.0.1");
    int port = Integer.parseInt(p.getProperty("strata.port", "6380"));
    try {
      client = new RespClient(host, port);
    } catch (IOException e) {
      throw new DBException("cannot connect to " + host + ":" + port + ": " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() throws DBException {
    try {
      if (client != null) {
        client.close();
      }
    } catch (IOException e) {
      throw new DBException(e);
    }
  }

  private static byte[] b(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public Status read(String table, String key, Set<String> fields, Map<String, ByteIterator> result) {
    try {
      if (fields == null) {
        Object r = client.call(List.of(b("HGETALL"), b(key)));
        if (!(r instanceof List) || ((List<?>) r).isEmpty()) {
          return Status.NOT_FOUND;
        }
        List<?> items = (List<?>) r;
        for (int i = 0; i + 1 < items.size(); i += 2) {
          result.put(new String((byte[]) items.get(i), StandardCharsets.UTF_8),
              new ByteArrayByteIterator((byte[]) items.get(i + 1)));
        }
        return Status.OK;
      }
      List<byte[]> args = new ArrayList<>();
      args.add(b("HMGET"));
      args.add(b(key));
      List<String> names = new ArrayList<>(fields);
      for (String f : names) {
        args.add(b(f));
      }
      Object r = client.call(args);
      if (!(r instanceof List)) {
        return Status.ERROR;
      }
      List<?> items = (List<?>) r;
      boolean any = false;
      for (int i = 0; i < names.size(); i++) {
        Object v = items.get(i);
        if (v instanceof byte[]) {
          result.put(names.get(i), new ByteArrayByteIterator((byte[]) v));
          any = true;
        }
      }
      return any ? Status.OK : Status.NOT_FOUND;
    } catch (IOException e) {
      return Status.ERROR;
    }
  }

  private Status hset(String key, Map<String, ByteIterator> values) {
    List<byte[]> args = new ArrayList<>(2 + 2 * values.size());
    args.add(b("HSET"));
    args.add(b(key));
    for (Map.Entry<String, ByteIterator> e : values.entrySet()) {
      args.add(b(e.getKey()));
      args.add(e.getValue().toArray());
    }
    try {
      Object r = client.call(args);
      return r instanceof Long ? Status.OK : Status.ERROR;
    } catch (IOException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    return hset(key, values);
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    return hset(key, values);
  }

  @Override
  public Status delete(String table, String key) {
    try {
      Object r = client.call(List.of(b("DEL"), b(key)));
      return r instanceof Long && (Long) r > 0 ? Status.OK : Status.NOT_FOUND;
    } catch (IOException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    return Status.NOT_IMPLEMENTED;
  }
}
