// Go's pgx (v5) against a real Lockstep server's PostgreSQL port.
//
// TestMain starts `lockstep server --pg 127.0.0.1:0 --http off` (the binary in
// LOCKSTEP_BIN, as compat/pg/run.sh passes it) and reads the port it printed. The tests
// cover prepared statements, every Lockstep type in binary (pgx's default, prepared and
// cached statements) and in text (pgx's exec and simple-protocol modes), NULLs, an error's
// SQLSTATE, CALL of a procedure and the transaction rules of docs/guide/postgres.md.
package pg

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// serverStartTimeout bounds the wait for the server's ready line.
const serverStartTimeout = 60 * time.Second

// testTimeout bounds each test's round trips.
const testTimeout = 60 * time.Second

var pgAddr string

const schema = `
CREATE TABLE t (
  id INTEGER NOT NULL PRIMARY KEY, ti TINYINT, si SMALLINT, i INTEGER, bi BIGINT,
  f FLOAT, d DECIMAL, v VARCHAR(40), b VARBINARY(16), ts TIMESTAMP
);
PARTITION TABLE t ON COLUMN id;
CREATE PROCEDURE NameOf PARTITION ON TABLE t COLUMN id AS SELECT v FROM t WHERE id = ?;
`

const columns = "id, ti, si, i, bi, f, d, v, b, ts"

// The decimal of every row: Lockstep's DECIMAL(38,12) at full width.
const decimalText = "-12345678901234567890123456.123456789012"

// row is one row of t as pgx scans it.
type row struct {
	ID int32
	TI int16
	SI int16
	I  int32
	BI int64
	F  float64
	D  pgtype.Numeric
	V  string
	B  []byte
	TS time.Time
}

func sample(id int32) row {
	// VoltDB keeps each integer type's lowest value for NULL: the lowest storable is one above.
	digits, _ := new(big.Int).SetString(strings.Replace(decimalText, ".", "", 1), 10)
	return row{
		ID: id, TI: -127, SI: 32767, I: -2147483647, BI: -9223372036854775807, F: -0.25,
		D: pgtype.Numeric{Int: digits, Exp: -12, Valid: true},
		V: "héllo, it's", B: []byte{0, 0xff, 0x10, 0x5c},
		TS: time.Date(2024, 2, 29, 23, 59, 58, 123456000, time.UTC),
	}
}

func TestMain(m *testing.M) {
	bin := os.Getenv("LOCKSTEP_BIN")
	if bin == "" {
		fmt.Fprintln(os.Stderr, "LOCKSTEP_BIN must name the lockstep binary (compat/pg/run.sh sets it)")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "lockstep-pgx-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	server := exec.Command(bin, "server", "--listen", "127.0.0.1:0", "--pg", "127.0.0.1:0", "--http", "off",
		"--sites", "2", "--command-log", "off", "--data", dir)
	stdout, err := server.StdoutPipe()
	if err == nil {
		err = server.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot start the server:", err)
		os.Exit(2)
	}
	ready := make(chan string, 1)
	go func() {
		addr := ""
		re := regexp.MustCompile(`PostgreSQL clients on (\S+)`)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if m := re.FindStringSubmatch(lines.Text()); m != nil {
				addr = m[1]
			}
			if strings.HasPrefix(lines.Text(), "lockstep ready") {
				ready <- addr
			}
		}
		close(ready)
	}()
	select {
	case pgAddr = <-ready:
	case <-time.After(serverStartTimeout):
	}
	code := 2
	if pgAddr == "" {
		fmt.Fprintln(os.Stderr, "the server did not print its PostgreSQL address")
	} else {
		code = m.Run()
	}
	_ = server.Process.Kill()
	_ = server.Wait()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var schemaOnce = make(chan struct{}, 1)

func connect(t *testing.T, ctx context.Context) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, "postgres://tester@"+pgAddr+"/lockstep?connect_timeout=10")
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	select {
	case schemaOnce <- struct{}{}:
		// Several statements in one simple query.
		if _, err := conn.Exec(ctx, schema, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("schema: %v", err)
		}
	default:
	}
	return conn
}

func context60(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func sqlstate(t *testing.T, err error) string {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("expected a PostgreSQL error, got %v", err)
	}
	return pgErr.Code
}

// The formats each mode uses: binary parameters and results (cache_statement,
// describe_exec) or text (exec; simple_protocol interpolates the values into the SQL).
var modes = []struct {
	name string
	mode pgx.QueryExecMode
}{
	{"cache_statement", pgx.QueryExecModeCacheStatement},
	{"describe_exec", pgx.QueryExecModeDescribeExec},
	{"exec", pgx.QueryExecModeExec},
	{"simple_protocol", pgx.QueryExecModeSimpleProtocol},
}

func scanRow(r pgx.Row) (row, error) {
	var got row
	err := r.Scan(&got.ID, &got.TI, &got.SI, &got.I, &got.BI, &got.F, &got.D, &got.V, &got.B, &got.TS)
	return got, err
}

func numericText(t *testing.T, n pgtype.Numeric) string {
	t.Helper()
	v, err := n.Value()
	if err != nil {
		t.Fatalf("numeric: %v", err)
	}
	s, _ := v.(string)
	return s
}

func TestEveryTypeRoundTripsInBinaryAndText(t *testing.T) {
	ctx := context60(t)
	conn := connect(t, ctx)
	insert := "INSERT INTO t (" + columns + ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
	for i, m := range modes {
		want := sample(int32(10 + i))
		if m.mode == pgx.QueryExecModeSimpleProtocol {
			// pgx writes a []byte into the SQL text as '\x00ff…', a string Lockstep's SQL does
			// not convert to VARBINARY (docs/guide/postgres.md, "Not yet").
			want.B = nil
		}
		tag, err := conn.Exec(ctx, insert, m.mode, want.ID, want.TI, want.SI, want.I, want.BI, want.F, want.D, want.V, want.B, want.TS)
		if err != nil || tag.String() != "INSERT 0 1" {
			t.Fatalf("%s: insert: %v %q", m.name, err, tag)
		}
		for _, read := range modes {
			got, err := scanRow(conn.QueryRow(ctx, "SELECT "+columns+" FROM t WHERE id = $1", read.mode, want.ID))
			if err != nil {
				t.Fatalf("written %s, read %s: %v", m.name, read.name, err)
			}
			if numericText(t, got.D) != numericText(t, want.D) {
				t.Errorf("written %s, read %s: decimal %s, want %s", m.name, read.name, numericText(t, got.D), numericText(t, want.D))
			}
			wantD := want.D
			got.D, want.D = pgtype.Numeric{}, pgtype.Numeric{}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("written %s, read %s:\n got %+v\nwant %+v", m.name, read.name, got, want)
			}
			want.D = wantD
		}
	}
	// The types the server describes.
	rows, err := conn.Query(ctx, "SELECT "+columns+" FROM t WHERE id = 10")
	if err != nil {
		t.Fatal(err)
	}
	var oids []uint32
	for _, f := range rows.FieldDescriptions() {
		oids = append(oids, f.DataTypeOID)
	}
	rows.Close()
	wantOIDs := []uint32{pgtype.Int4OID, pgtype.Int2OID, pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID,
		pgtype.Float8OID, pgtype.NumericOID, pgtype.VarcharOID, pgtype.ByteaOID, pgtype.TimestampOID}
	if !reflect.DeepEqual(oids, wantOIDs) {
		t.Errorf("column types %v, want %v", oids, wantOIDs)
	}
}

func TestNullsInEveryMode(t *testing.T) {
	ctx := context60(t)
	conn := connect(t, ctx)
	for i, m := range modes {
		id := int32(30 + i)
		_, err := conn.Exec(ctx, "INSERT INTO t ("+columns+") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)", m.mode,
			id, nil, nil, nil, nil, nil, nil, nil, nil, nil)
		if err != nil {
			t.Fatalf("%s: insert NULLs: %v", m.name, err)
		}
		for _, read := range modes {
			var ti, si *int16
			var i4 *int32
			var bi *int64
			var f *float64
			var d pgtype.Numeric
			var v *string
			var b []byte
			var ts *time.Time
			err := conn.QueryRow(ctx, "SELECT ti, si, i, bi, f, d, v, b, ts FROM t WHERE id = $1", read.mode, id).
				Scan(&ti, &si, &i4, &bi, &f, &d, &v, &b, &ts)
			if err != nil {
				t.Fatalf("written %s, read %s: %v", m.name, read.name, err)
			}
			if ti != nil || si != nil || i4 != nil || bi != nil || f != nil || d.Valid || v != nil || b != nil || ts != nil {
				t.Errorf("written %s, read %s: a NULL came back as a value", m.name, read.name)
			}
		}
	}
}

func TestPreparedStatementsRunManyTimes(t *testing.T) {
	ctx := context60(t)
	conn := connect(t, ctx)
	stmt, err := conn.Prepare(ctx, "ins", "INSERT INTO t (id, v) VALUES ($1, $2)")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(stmt.ParamOIDs, []uint32{pgtype.Int4OID, pgtype.VarcharOID}) {
		t.Errorf("parameter types %v", stmt.ParamOIDs)
	}
	for n := 100; n < 110; n++ {
		if _, err := conn.Exec(ctx, "ins", n, fmt.Sprintf("n%d", n)); err != nil {
			t.Fatal(err)
		}
	}
	// A batch: one round trip of several binds of the same statement.
	batch := &pgx.Batch{}
	for n := 110; n < 115; n++ {
		batch.Queue("ins", n, fmt.Sprintf("n%d", n))
	}
	if err := conn.SendBatch(ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	var count int64
	var lo, hi string
	if err := conn.QueryRow(ctx, "SELECT COUNT(*), MIN(v), MAX(v) FROM t WHERE id >= $1 AND id < $2", 100, 115).Scan(&count, &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if count != 15 || lo != "n100" || hi != "n114" {
		t.Errorf("got %d %s %s", count, lo, hi)
	}
}

func TestErrorsCarryTheirSQLSTATE(t *testing.T) {
	ctx := context60(t)
	conn := connect(t, ctx)
	if _, err := conn.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 300); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ sql, state string }{
		{"INSERT INTO t (id) VALUES (300)", "23505"},
		{"SELECT * FROM no_such_table", "42P01"},
		{"SELEKT 1", "42601"},
		{"CALL NoSuchProcedure(1)", "42883"},
	} {
		_, err := conn.Exec(ctx, c.sql)
		if got := sqlstate(t, err); got != c.state {
			t.Errorf("%s: SQLSTATE %s, want %s (%v)", c.sql, got, c.state, err)
		}
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT COUNT(*) FROM t WHERE id = 300").Scan(&n); err != nil || n != 1 {
		t.Errorf("the connection goes on after errors: %d %v", n, err)
	}
}

func TestCallRunsAProcedureWithItsRows(t *testing.T) {
	ctx := context60(t)
	conn := connect(t, ctx)
	if _, err := conn.Exec(ctx, "CALL T.insert($1, NULL, NULL, NULL, NULL, NULL, NULL, $2, NULL, NULL)", 400, "four hundred"); err != nil {
		t.Fatal(err)
	}
	for _, m := range modes {
		for _, sql := range []string{"CALL NameOf($1)", "SELECT * FROM NameOf($1)"} {
			var v string
			if err := conn.QueryRow(ctx, sql, m.mode, 400).Scan(&v); err != nil || v != "four hundred" {
				t.Errorf("%s %s: %q %v", m.name, sql, v, err)
			}
		}
	}
}

func TestATransactionCommitsOneChangeAndRefusesASecond(t *testing.T) {
	ctx := context60(t)
	conn := connect(t, ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (id, v) VALUES ($1, $2)", 500, "committed"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("COMMIT: %v", err)
	}
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 501); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "INSERT INTO t (id) VALUES ($1)", 502)
	if state := sqlstate(t, err); state != "0A000" || !strings.Contains(err.Error(), "one statement") {
		t.Errorf("a second change: %s %v", state, err)
	}
	_, err = tx.Exec(ctx, "SELECT 1 FROM t")
	if state := sqlstate(t, err); state != "25P02" {
		t.Errorf("after the refusal: %s %v", state, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("ROLLBACK: %v", err)
	}
	rows, err := conn.Query(ctx, "SELECT id FROM t WHERE id >= 500 AND id < 600 ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	// 501 committed when it ran (BEGIN's NOTICE says so); 502 never ran.
	if err != nil || !reflect.DeepEqual(ids, []int32{500, 501}) {
		t.Errorf("rows %v %v", ids, err)
	}
}
