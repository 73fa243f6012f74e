import java.io.IOException;
import java.io.PrintWriter;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Objects;
import org.apache.derby.drda.NetworkServerControl;

/**
 * The local catalog's Derby network server (ingestion/runtime/metastore.py), which ends itself when nothing needs
 * it any more: at once when its database folder is deleted (or replaced by another), and, when started on a
 * command's behalf (idle seconds > 0), once for that long no client process registered in the clients folder is
 * alive and no connection to its port is open.
 *
 * <p>Run as a single source file: {@code java -cp <derby jars> MetastoreServer.java <db folder> <port>
 * <idle seconds, 0: never> <clients folder> <port file>}. A client registers by writing a file named by its pid
 * into the clients folder before it reads the port file; on going idle the server deletes the port file first and
 * looks at the clients once more, so a client that registered meanwhile either keeps it running or finds no port
 * and starts a server of its own.
 */
public final class MetastoreServer {
  private static final long POLL_MILLIS = 2000;

  public static void main(String[] args) throws Exception {
    Path db = Paths.get(args[0]);
    int port = Integer.parseInt(args[1]);
    long idleMillis = Long.parseLong(args[2]) * 1000;
    Path clients = Paths.get(args[3]);
    Path portFile = Paths.get(args[4]);
    Object folder = Files.readAttributes(db, BasicFileAttributes.class).fileKey();
    NetworkServerControl server = new NetworkServerControl(InetAddress.getByName("127.0.0.1"), port);
    server.start(new PrintWriter(System.out, true));
    long used = System.currentTimeMillis();
    while (true) {
      Thread.sleep(POLL_MILLIS);
      if (!Objects.equals(folder, fileKey(db))) {
        end(server, "its database folder " + db + " is gone");
      }
      try {
        if (inUse(port, clients)) {
          used = System.currentTimeMillis();
        } else if (idleMillis > 0 && System.currentTimeMillis() - used >= idleMillis) {
          Files.deleteIfExists(portFile);  // from now on a new client starts its own server
          if (inUse(port, clients)) {  // a client registered just before: it has the port, keep serving it
            Files.writeString(portFile, String.valueOf(port), StandardCharsets.UTF_8);
            used = System.currentTimeMillis();
          } else {
            end(server, "no client for " + idleMillis / 1000 + "s");
          }
        }
      } catch (IOException e) {  // the state folder changing under it: the next look decides
        System.out.println("metastore server: " + e);
      }
    }
  }

  private static Object fileKey(Path path) {
    try {
      return Files.readAttributes(path, BasicFileAttributes.class).fileKey();
    } catch (IOException e) {
      return null;
    }
  }

  private static void end(NetworkServerControl server, String why) {
    System.out.println("metastore server: stopping, " + why);
    try {
      server.shutdown();
    } catch (Exception e) {  // a folder deleted under it: nothing left to shut down cleanly
      System.out.println("metastore server: " + e);
    }
    System.exit(0);
  }

  /** A live registered client (files of ended ones are removed), or an open connection to the port. */
  private static boolean inUse(int port, Path clients) throws IOException {
    boolean alive = false;
    try (DirectoryStream<Path> files = Files.newDirectoryStream(clients)) {
      for (Path file : files) {
        long pid;
        try {
          pid = Long.parseLong(file.getFileName().toString());
        } catch (NumberFormatException e) {
          continue;
        }
        if (ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) {
          alive = true;
        } else {
          Files.deleteIfExists(file);
        }
      }
    } catch (NoSuchFileException e) {
      // no client registered yet
    }
    return alive || connections(port) > 0;
  }

  /** Established TCP connections whose local port is the server's (Linux's /proc; elsewhere none are seen). */
  private static int connections(int port) {
    int count = 0;
    String local = String.format(":%04X", port);
    for (String table : new String[] {"/proc/net/tcp", "/proc/net/tcp6"}) {
      try {
        for (String line : Files.readAllLines(Paths.get(table), StandardCharsets.US_ASCII)) {
          String[] fields = line.trim().split("\\s+");
          if (fields.length > 3 && fields[1].endsWith(local) && fields[3].equals("01")) {
            count++;
          }
        }
      } catch (IOException e) {
        // no such table here
      }
    }
    return count;
  }
}
