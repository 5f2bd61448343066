// GEOGRAPHY_POINT and GEOGRAPHY with the real client's GeographyPointValue and GeographyValue:
// as procedure parameters (wire types 26 and 27) and in results, NULLs, and the geospatial
// functions' answers read as the client reads them.
package org.lockstep.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.voltdb.VoltTable;
import org.voltdb.VoltType;
import org.voltdb.client.Client;
import org.voltdb.client.ClientResponse;
import org.voltdb.types.GeographyPointValue;
import org.voltdb.types.GeographyValue;

class GeographyTest {
    private static LockstepServer server;
    private static Client client;

    private static final String SQUARE = "POLYGON ((0.0 0.0, 1.0 0.0, 1.0 1.0, 0.0 1.0, 0.0 0.0), (0.2 0.2, 0.2 0.4, 0.4 0.4, 0.2 0.2))";

    @BeforeAll
    static void start() throws Exception {
        server = LockstepServer.start("geo");
        client = Clients.connect(server.port());
        Clients.adHoc(client, "CREATE TABLE places (id INTEGER NOT NULL PRIMARY KEY, loc GEOGRAPHY_POINT, area GEOGRAPHY(1024))");
        Clients.adHoc(client, "PARTITION TABLE places ON COLUMN id");
    }

    @AfterAll
    static void stop() {
        Clients.closeQuietly(client);
        server.close();
    }

    private static VoltTable one(ClientResponse r) {
        assertEquals(ClientResponse.SUCCESS, r.getStatus(), r.getStatusString());
        VoltTable t = r.getResults()[0];
        assertTrue(t.advanceRow());
        return t;
    }

    @Test
    void valuesRoundTripAsParametersAndResults() throws Exception {
        GeographyPointValue boston = new GeographyPointValue(-71.0645, 42.3589);
        GeographyValue square = GeographyValue.fromWKT(SQUARE);
        assertEquals(1, Clients.scalar(client.callProcedure("PLACES.insert", 1, boston, square)));
        assertEquals(1, Clients.scalar(client.callProcedure("PLACES.insert", 2, null, null)));

        VoltTable t = one(client.callProcedure("PLACES.select", 1));
        assertEquals(VoltType.GEOGRAPHY_POINT, t.getColumnType(1));
        assertEquals(VoltType.GEOGRAPHY, t.getColumnType(2));
        assertEquals(boston, t.getGeographyPointValue("LOC"));
        assertEquals(square, t.getGeographyValue("AREA"));
        assertEquals(SQUARE, t.getGeographyValue("AREA").toString());

        t = one(client.callProcedure("PLACES.select", 2));
        assertNull(t.getGeographyPointValue("LOC"));
        assertTrue(t.wasNull());
        assertNull(t.getGeographyValue("AREA"));
    }

    @Test
    void functionsAnswerWhatTheClientExpects() throws Exception {
        GeographyValue square = GeographyValue.fromWKT(SQUARE);
        assertEquals(1, Clients.scalar(client.callProcedure("PLACES.insert", 3, new GeographyPointValue(0.5, 0.5), square)));
        // The server's text is the client's text.
        VoltTable t = one(Clients.adHoc(client, "SELECT ASTEXT(loc), ASTEXT(area), LONGITUDE(loc) FROM places WHERE id = 3"));
        assertEquals(new GeographyPointValue(0.5, 0.5).toString(), t.getString(0));
        assertEquals(square.toString(), t.getString(1));
        assertEquals(0.5, t.getDouble(2));
        // A point parameter: inside the outer ring and out of the hole, or in the hole.
        t = one(Clients.adHoc(client, "SELECT COUNT(*) FROM places WHERE CONTAINS(area, ?)", new GeographyPointValue(0.9, 0.9)));
        assertTrue(t.getLong(0) >= 1);
        t = one(Clients.adHoc(client, "SELECT COUNT(*) FROM places WHERE id = 3 AND CONTAINS(area, ?)", new GeographyPointValue(0.25, 0.35)));
        assertEquals(0, t.getLong(0));
        // One degree along the equator on VoltDB's sphere (radius 6,371,008.8 m).
        t = one(Clients.adHoc(client, "SELECT DISTANCE(?, POINTFROMTEXT('POINT(1 0)'))", new GeographyPointValue(0, 0)));
        assertEquals(6_371_008.8 * Math.PI / 180, t.getDouble(0), 1e-6);
        t = one(Clients.adHoc(client, "SELECT CENTROID(area) FROM places WHERE id = 3"));
        assertEquals(VoltType.GEOGRAPHY_POINT, t.getColumnType(0));
    }
}
