import java.io.File;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * A one-datanode HDFS (Hadoop's MiniDFSCluster) on 127.0.0.1 for tubespark's tests of shared directories.
 * Args: base directory. Prints "WEBHDFS <namenode http port>" once the cluster is up, then runs until killed.
 * Permissions are off: the tests' requests name no Hadoop user.
 */
public final class MiniHdfs {
    private MiniHdfs() {
    }

    public static void main(String[] args) throws Exception {
        Configuration conf = new HdfsConfiguration();
        conf.setBoolean("dfs.permissions.enabled", false);
        conf.setBoolean("dfs.webhdfs.enabled", true);
        conf.set("dfs.namenode.http-address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.setInt("dfs.replication", 1);
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf, new File(args[0]))
                .numDataNodes(1).nameNodePort(0).nameNodeHttpPort(0).build();
        cluster.waitActive();
        Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
        System.out.println("WEBHDFS " + cluster.getNameNode().getHttpAddress().getPort());
        System.out.flush();
        Thread.currentThread().join();
    }
}
