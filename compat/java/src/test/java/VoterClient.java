// VoterClient: votes once through the VoltDB Java client, then prints the results (apps/voter).
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientConfig;
import org.voltdb.client.ClientFactory;

public class VoterClient {
    public static void main(String[] args) throws Exception {
        String server = args.length > 0 ? args[0] : "localhost:21212";
        // With --security on, pass a configured user and password instead.
        Client client = ClientFactory.createClient(new ClientConfig("", ""));
        client.createConnection(server);
        try {
            // Vote(phone_number, contestant_number, max_votes) returns 0 when the vote counts.
            long code = client.callProcedure("Vote", 5550004321L, 3, 2).getResults()[0].asScalarLong();
            System.out.println("Vote returned " + code);
            VoltTable results = client.callProcedure("Results").getResults()[0];
            while (results.advanceRow()) {
                System.out.println(results.getString("CONTESTANT_NAME") + " has "
                        + results.getLong("TOTAL_VOTES") + " votes");
            }
        } finally {
            client.close();
        }
    }
}
