// VoterJdbc: votes once through the JDBC driver inside voltdbclient, then counts the votes.
import java.sql.CallableStatement;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;

public class VoterJdbc {
    public static void main(String[] args) throws Exception {
        String server = args.length > 0 ? args[0] : "localhost:21212";
        Class.forName("org.voltdb.jdbc.Driver");
        // With --security on: DriverManager.getConnection(url, user, password).
        try (Connection conn = DriverManager.getConnection("jdbc:voltdb://" + server);
                CallableStatement vote = conn.prepareCall("{call Vote(?, ?, ?)}");
                Statement query = conn.createStatement()) {
            vote.setLong(1, 5550008765L);
            vote.setInt(2, 4);
            vote.setInt(3, 2);
            try (ResultSet rs = vote.executeQuery()) {
                rs.next();
                System.out.println("Vote returned " + rs.getLong(1));
            }
            try (ResultSet rs = query.executeQuery("SELECT COUNT(*) FROM votes")) {
                rs.next();
                System.out.println(rs.getLong(1) + " votes so far");
            }
        }
    }
}
