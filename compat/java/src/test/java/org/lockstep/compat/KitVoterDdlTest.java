// VoltDB's Voter example (examples/voter) loaded the way its own schema script is: sqlcmd
// sends `LOAD CLASSES voter-procs.jar` as @UpdateClasses and every other statement through
// @AdHoc, with the procedures declared `CREATE PROCEDURE [PARTITION ON …] FROM CLASS voter.X`
// (no name of their own, no PARAMETER clause). Then a known set of votes, and the exact
// answers of the example's reports: Results, ContestantWinningStates, GetStateHeatmap.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;

class KitVoterDdlTest {
    /** The example's schema, statement by statement, in its own forms (our text). */
    private static final String[] SCHEMA = {
        "CREATE TABLE contestants\n(\n  contestant_number integer     NOT NULL\n, contestant_name   varchar(50) NOT NULL\n"
            + ", CONSTRAINT PK_contestants PRIMARY KEY\n  (\n    contestant_number\n  )\n);",
        "CREATE TABLE votes\n(\n  phone_number       bigint     NOT NULL\n, state              varchar(2) NOT NULL\n"
            + ", contestant_number  integer    NOT NULL\n);",
        "PARTITION TABLE votes ON COLUMN phone_number;",
        "CREATE TABLE area_code_state\n(\n  area_code smallint   NOT NULL\n, state     varchar(2) NOT NULL\n"
            + ", CONSTRAINT PK_area_code_state PRIMARY KEY\n  (\n    area_code\n  )\n);",
        "CREATE VIEW v_votes_by_phone_number\n(\n  phone_number\n, num_votes\n)\nAS\n   SELECT phone_number\n        , COUNT(*)\n"
            + "     FROM votes\n GROUP BY phone_number\n;",
        "CREATE VIEW v_votes_by_contestant_number_state\n(\n  contestant_number\n, state\n, num_votes\n)\nAS\n"
            + "   SELECT contestant_number\n        , state\n        , COUNT(*)\n     FROM votes\n GROUP BY contestant_number\n"
            + "        , state\n;"};
    private static final String[] PROCEDURES = {"CREATE PROCEDURE FROM CLASS voter.Initialize;", "CREATE PROCEDURE FROM CLASS voter.Results;",
        "CREATE PROCEDURE PARTITION ON TABLE votes COLUMN phone_number FROM CLASS voter.Vote;",
        "CREATE PROCEDURE FROM CLASS voter.ContestantWinningStates;", "CREATE PROCEDURE FROM CLASS voter.GetStateHeatmap;"};
    private static final long MAX_VOTES = 10;
    /** Area codes of the example's table: 617 Massachusetts, 212 New York, 907 Alaska. */
    private static final long MA = 617, NY = 212, AK = 907;

    private static long phone(long areaCode, long n) {
        return areaCode * 10_000_000L + n;
    }

    private static long vote(Client c, long phone, int contestant) throws Exception {
        ClientResponse r = c.callProcedure("Vote", phone, contestant, MAX_VOTES);
        assertEquals(ClientResponse.SUCCESS, r.getStatus(), r.getStatusString());
        return r.getResults()[0].asScalarLong();
    }

    /** Each row of a table as a list of its cells' text. */
    private static List<List<String>> rows(VoltTable t) {
        List<List<String>> out = new ArrayList<>();
        while (t.advanceRow()) {
            List<String> row = new ArrayList<>();
            for (int i = 0; i < t.getColumnCount(); i++) {
                row.add(String.valueOf(t.get(i, t.getColumnType(i))));
            }
            out.add(row);
        }
        return out;
    }

    @Test
    void theExamplesScriptLoadsAndItsReportsAnswerExactly() throws Exception {
        try (LockstepServer server = LockstepServer.start("kit-voter-ddl", Apps.procedures("voter"))) {
            Client c = Clients.connect(server.port());
            try {
                for (String sql : SCHEMA) {
                    Clients.adHoc(c, sql);
                }
                ClientResponse jar = c.callProcedure("@UpdateClasses", Apps.jar("voter/Initialize.class", "voter/Results.class",
                        "voter/Vote.class", "voter/ContestantWinningStates.class", "voter/GetStateHeatmap.class"), null);
                assertEquals(ClientResponse.SUCCESS, jar.getStatus(), jar.getStatusString());
                for (String sql : PROCEDURES) {
                    Clients.adHoc(c, sql);
                }
                VoltTable procs = c.callProcedure("@SystemCatalog", "PROCEDURES").getResults()[0];
                List<String> names = new ArrayList<>();
                while (procs.advanceRow()) {
                    names.add(procs.getString("PROCEDURE_NAME"));
                }
                for (String p : List.of("Initialize", "Results", "Vote", "ContestantWinningStates", "GetStateHeatmap")) {
                    assertEquals(true, names.contains(p), p + " in " + names);
                }

                assertEquals(4, c.callProcedure("Initialize", 4, "Edwina Burnam,Tabatha Gehling,Kelly Clauss,Jessie Alloway")
                        .getResults()[0].asScalarLong());
                // MA: 1 twice, 2 three times. NY: 1 and 3 twice each (a tie). AK: 1 once.
                int n = 0;
                for (int contestant : new int[] {1, 1, 2, 2, 2}) {
                    assertEquals(0, vote(c, phone(MA, n++), contestant));
                }
                for (int contestant : new int[] {1, 3, 1, 3}) {
                    assertEquals(0, vote(c, phone(NY, n++), contestant));
                }
                assertEquals(0, vote(c, phone(AK, n++), 1));
                assertEquals(1, vote(c, phone(AK, n++), 999), "no such contestant");

                // Results: (name, number, total), most votes first; contestant 4 has none.
                VoltTable results = c.callProcedure("Results").getResults()[0];
                assertEquals(List.of("CONTESTANT_NAME", "CONTESTANT_NUMBER", "TOTAL_VOTES"),
                        List.of(results.getColumnName(0), results.getColumnName(1), results.getColumnName(2)));
                assertEquals(List.of(List.of("Edwina Burnam", "1", "5"), List.of("Tabatha Gehling", "2", "3"),
                        List.of("Kelly Clauss", "3", "2")), rows(results));

                // ContestantWinningStates(contestant, max): a tie goes to the lower number.
                VoltTable won = c.callProcedure("ContestantWinningStates", 1, 5).getResults()[0];
                assertEquals(List.of("state", "num_votes"), List.of(won.getColumnName(0), won.getColumnName(1)));
                assertEquals(List.of(List.of("NY", "2"), List.of("AK", "1")), rows(won));
                assertEquals(List.of(List.of("NY", "2")), rows(c.callProcedure("ContestantWinningStates", 1, 1).getResults()[0]));
                assertEquals(List.of(List.of("MA", "3")), rows(c.callProcedure("ContestantWinningStates", 2, 5).getResults()[0]));
                assertEquals(0, c.callProcedure("ContestantWinningStates", 3, 5).getResults()[0].getRowCount());

                // GetStateHeatmap: each state's leaders (both tied ones in NY), then each
                // contestant's total. The Java's queries have no ORDER BY: compare as sets.
                VoltTable[] heat = c.callProcedure("GetStateHeatmap").getResults();
                assertEquals(2, heat.length);
                List<List<String>> leaders = rows(heat[0]);
                leaders.sort((a, b) -> String.join(",", a).compareTo(String.join(",", b)));
                assertEquals(List.of(List.of("AK", "1", "1"), List.of("MA", "2", "3"), List.of("NY", "1", "2"), List.of("NY", "3", "2")),
                        leaders);
                List<List<String>> totals = rows(heat[1]);
                totals.sort((a, b) -> a.get(0).compareTo(b.get(0)));
                assertEquals(List.of(List.of("1", "5"), List.of("2", "3"), List.of("3", "2")), totals);
            } finally {
                Clients.closeQuietly(c);
            }
        }
    }
}
