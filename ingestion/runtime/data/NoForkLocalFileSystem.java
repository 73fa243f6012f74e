package ingest;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system (`file:`) without a child process per file.
 *
 * Without Hadoop's native library (pip's pyspark has none), RawLocalFileSystem runs `chmod` for every file and
 * directory it creates and `readlink` for every FileContext rename: a Spark micro-batch with a Delta commit starts
 * about 26 of them (checkpoint offsets and commits, Delta's JSON and checksum, each with its temporary file and
 * their .crc), 10 to 50 ms each from a JVM of a gigabyte. This class sets permissions through java.nio instead and
 * answers the symlink question with java.nio, with the same results: the same permission bits, and the same file
 * status for anything that is not a symlink. Checksums (.crc files) are kept.
 *
 * Used for `fs.file.impl` (FileSystem API: Parquet files, Spark's checkpoint) and, through {@link Fs}, for
 * `fs.AbstractFileSystem.file.impl` (FileContext API: Delta's log, Spark's checkpoint renames).
 */
public class NoForkLocalFileSystem extends LocalFileSystem {

    public NoForkLocalFileSystem() {
        super(new Raw());
    }

    /** RawLocalFileSystem with permissions set and symlinks detected in-process. */
    public static class Raw extends RawLocalFileSystem {

        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            // The sticky bit and the like have no java.nio form; Hadoop's own way handles them.
            if (NativeIO.isAvailable() || permission.getStickyBit() || permission.toShort() > 0777) {
                super.setPermission(p, permission);
                return;
            }
            Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
        }

        @Override
        public FileStatus getFileLinkStatus(Path f) throws IOException {
            // Hadoop asks `readlink` with the path's URI string ("file:/..."), which never names a file, and
            // then answers getFileStatus(f): the same answer here, without the child process.
            if (Files.isSymbolicLink(pathToFile(f).toPath())) {
                return super.getFileLinkStatus(f);
            }
            return getFileStatus(f);
        }

        static Set<PosixFilePermission> posix(int mode) {
            PosixFilePermission[] order = {
                PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
                PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
                PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
            };
            Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
            for (int bit = 0; bit < order.length; bit++) {
                if ((mode & (1 << bit)) != 0) {
                    set.add(order[bit]);
                }
            }
            return set;
        }
    }

    /** The FileContext side: what Hadoop's LocalFs is (checksums over the raw file system), over {@link Raw}. */
    public static class Fs extends ChecksumFs {
        public Fs(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(new RawFs(uri, conf));
        }
    }

    /** What Hadoop's RawLocalFs is, over {@link Raw}. */
    public static class RawFs extends DelegateToFileSystem {
        public RawFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
            super(uri, new Raw(), conf, "file", false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1;
        }

        @Override
        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        @SuppressWarnings("deprecation")
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true;
        }
    }
}
