// Run by deploy/cassandra/cassandra.sh (Java's single-file source launcher, with the node's
// own jars on the classpath, which bring the DataStax driver 3): turns a fresh node's
// default superuser into one with a random password and creates the role Paceline logs in
// with. Idempotent: a second run (after a partial first one) logs in with the new superuser
// password and sets the same passwords again.
//
//   java -cp "$CACHE/lib/*" AuthSetup.java HOST PORT SUPERUSER_PASSWORD_FILE ROLE ROLE_PASSWORD_FILE [AUTH_RF]
//
// With AUTH_RF (a cluster), system_auth is first replicated to AUTH_RF nodes, before the
// roles are written, so that a login still works with a node down.
//
// Passwords are read from the files (mode 600), never taken as arguments (which `ps` shows)
// and never printed.

import com.datastax.driver.core.Cluster;
import com.datastax.driver.core.Session;
import com.datastax.driver.core.exceptions.AuthenticationException;
import java.nio.file.Files;
import java.nio.file.Path;

public class AuthSetup {
    static String read(String file) throws Exception {
        String s = Files.readString(Path.of(file)).strip();
        if (s.isEmpty() || !s.matches("[A-Za-z0-9]+")) {
            throw new IllegalArgumentException(file + ": expected a non-empty alphanumeric password");
        }
        return s;
    }

    static Cluster cluster(String host, int port, String password) {
        return Cluster.builder()
                .addContactPoint(host)
                .withPort(port)
                .withCredentials("cassandra", password)
                .withoutMetrics()
                .withoutJMXReporting()
                .build();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5 && args.length != 6) {
            System.err.println("usage: AuthSetup HOST PORT SUPERUSER_PASSWORD_FILE ROLE ROLE_PASSWORD_FILE [AUTH_RF]");
            System.exit(64);
        }
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        String superPassword = read(args[2]);
        String role = args[3];
        String rolePassword = read(args[4]);
        int authRf = args.length == 6 ? Integer.parseInt(args[5]) : 0;
        if (!role.matches("[a-z][a-z0-9_]*")) {
            throw new IllegalArgumentException("role name must be lower-case letters, digits and _");
        }
        // The default superuser appears shortly after CQL opens; keep trying for a minute.
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            for (String password : new String[] {"cassandra", superPassword}) {
                try (Cluster c = cluster(host, port, password); Session s = c.connect()) {
                    if (authRf > 0) {
                        s.execute("ALTER KEYSPACE system_auth WITH replication = {'class': 'SimpleStrategy', "
                                + "'replication_factor': " + authRf + "}");
                    }
                    s.execute("ALTER ROLE cassandra WITH PASSWORD = '" + superPassword + "'");
                    s.execute("CREATE ROLE IF NOT EXISTS " + role + " WITH LOGIN = true AND PASSWORD = '"
                            + rolePassword + "'");
                    s.execute("ALTER ROLE " + role + " WITH LOGIN = true AND PASSWORD = '" + rolePassword + "'");
                    // A test and development node: the role may create keyspaces and use every
                    // one (also those made before the node required a login). Production grants
                    // less; see docs/operations.md.
                    s.execute("GRANT ALL PERMISSIONS ON ALL KEYSPACES TO " + role);
                    // Virtual tables are outside ALL KEYSPACES; the tests read
                    // system_views.clients to see that their connection is encrypted.
                    s.execute("GRANT SELECT ON KEYSPACE system_views TO " + role);
                    System.out.println("AuthSetup: superuser password set, role " + role + " ready");
                    return;
                } catch (AuthenticationException e) {
                    // Wrong one of the two passwords, or the default role not there yet.
                } catch (RuntimeException e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw e;
                    }
                }
            }
            if (System.currentTimeMillis() > deadline) {
                System.err.println("AuthSetup: neither the default nor the recorded superuser password is accepted");
                System.exit(1);
            }
            Thread.sleep(1000);
        }
    }
}
