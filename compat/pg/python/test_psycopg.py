"""Python's psycopg 3 against a real Lockstep server's PostgreSQL port.

Started by compat/pg/run.sh with the lockstep binary in LOCKSTEP_BIN. Each test class
starts its own server (`--pg 127.0.0.1:0`, `--http off`) and reads the port it printed.
Covers prepared statements, every Lockstep type in text and in binary (parameters and
results), NULLs, an error's SQLSTATE, CALL of a procedure and the transaction rules of
docs/guide/postgres.md.
"""

import datetime
import decimal
import os
import re
import shutil
import subprocess
import tempfile
import threading
import unittest

import psycopg
from psycopg import errors

# How long the server may take to print its ready line.
SERVER_START_TIMEOUT_S = 60
# How long a connection attempt may take.
CONNECT_TIMEOUT_S = 10

SCHEMA = [
    """CREATE TABLE t (
         id INTEGER NOT NULL PRIMARY KEY, ti TINYINT, si SMALLINT, i INTEGER, bi BIGINT,
         f FLOAT, d DECIMAL, v VARCHAR(40), b VARBINARY(16), ts TIMESTAMP)""",
    "PARTITION TABLE t ON COLUMN id",
    "CREATE PROCEDURE NameOf PARTITION ON TABLE t COLUMN id AS SELECT v FROM t WHERE id = ?",
]

COLUMNS = "id, ti, si, i, bi, f, d, v, b, ts"
# One value per column at the edges of each type (VoltDB keeps each integer type's lowest
# value for NULL, so the lowest storable is one above it).
ROW = (
    1,
    -127,
    32767,
    -2147483647,
    -9223372036854775807,
    -0.25,
    decimal.Decimal("-12345678901234567890123456.123456789012"),
    "héllo, it's",
    bytes([0, 0xFF, 0x10, 0x5C]),
    datetime.datetime(2024, 2, 29, 23, 59, 58, 123456),
)


class Server:
    """A lockstep server in a temporary directory, with `extra` flags; `host` and `port` are
    its PostgreSQL address."""

    def __init__(self, extra=(), dir=None):
        binary = os.environ["LOCKSTEP_BIN"]
        self.dir = dir or tempfile.TemporaryDirectory(prefix="lockstep-psycopg-")
        self.proc = subprocess.Popen(
            [binary, "server", "--listen", "127.0.0.1:0", "--pg", "127.0.0.1:0", "--http", "off",
             "--sites", "2", "--command-log", "off", "--data", os.path.join(self.dir.name, "data"), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        found = {}
        done = threading.Event()

        def read():
            for line in self.proc.stdout:
                m = re.search(r"PostgreSQL clients on (\S+):(\d+)", line)
                if m:
                    found["host"], found["port"] = m.group(1), int(m.group(2))
                if line.startswith("lockstep ready"):
                    done.set()
            done.set()

        threading.Thread(target=read, daemon=True).start()
        if not done.wait(SERVER_START_TIMEOUT_S) or "port" not in found:
            self.stop()
            raise RuntimeError("the lockstep server did not print its PostgreSQL address")
        self.host, self.port = found["host"], found["port"]

    def connect(self, **kwargs):
        return psycopg.connect(host=self.host, port=self.port, user="tester", dbname="lockstep",
                               connect_timeout=CONNECT_TIMEOUT_S, **kwargs)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=SERVER_START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc.stdout.close()
        self.dir.cleanup()


class PsycopgTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        with cls.server.connect(autocommit=True) as conn:
            for ddl in SCHEMA:
                conn.execute(ddl)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.conn = self.server.connect(autocommit=True)

    def tearDown(self):
        self.conn.close()

    def insert(self, row, placeholder):
        marks = ", ".join([placeholder] * len(row))
        self.conn.execute(f"INSERT INTO t ({COLUMNS}) VALUES ({marks})", row, prepare=True)

    def select(self, id, binary):
        cur = self.conn.cursor(binary=binary)
        return cur.execute(f"SELECT {COLUMNS} FROM t WHERE id = %s", (id,), prepare=True).fetchone()

    def test_every_type_round_trips_in_binary_and_in_text(self):
        # %b sends each parameter in binary, %t in text; results are asked in both formats.
        for id, placeholder in ((1, "%b"), (2, "%t")):
            row = (id,) + ROW[1:]
            self.insert(row, placeholder)
            for binary in (True, False):
                got = self.select(id, binary)
                self.assertEqual(got, row, f"parameters {placeholder}, binary results {binary}")
                self.assertEqual(str(got[6]), "-12345678901234567890123456.123456789012")
        # The declared types, as the server describes the columns.
        cur = self.conn.execute(f"SELECT {COLUMNS} FROM t WHERE id = 1")
        names = [psycopg.adapters.types.get(c.type_code).name for c in cur.description]
        self.assertEqual(names, ["int4", "int2", "int2", "int4", "int8", "float8", "numeric", "varchar",
                                 "bytea", "timestamp"])
        self.assertEqual([c.name for c in cur.description],
                         ["ID", "TI", "SI", "I", "BI", "F", "D", "V", "B", "TS"])

    def test_nulls_in_both_formats(self):
        for id, placeholder in ((11, "%b"), (12, "%t")):
            row = (id,) + (None,) * 9
            self.insert(row, placeholder)
            for binary in (True, False):
                self.assertEqual(self.select(id, binary), row)
        self.conn.execute("UPDATE t SET v = %s WHERE id = %s", (None, 1))
        self.assertEqual(self.conn.execute("SELECT v FROM t WHERE id = 1").fetchone(), (None,))
        self.conn.execute("UPDATE t SET v = %s WHERE id = %s", (ROW[7], 1))

    def test_a_prepared_statement_runs_many_times(self):
        with self.conn.cursor() as cur:
            for n in range(100, 110):
                cur.execute("INSERT INTO t (id, v) VALUES (%s, %s)", (n, f"n{n}"), prepare=True)
            cur.execute("SELECT COUNT(*), MIN(v), MAX(v) FROM t WHERE id >= %s AND id < %s", (100, 110), prepare=True)
            self.assertEqual(cur.fetchone(), (10, "n100", "n109"))
        # executemany: one statement, a pipeline of binds.
        with self.conn.cursor() as cur:
            cur.executemany("INSERT INTO t (id, bi) VALUES (%s, %s)", [(n, n * 1000) for n in range(200, 205)])
            cur.execute("SELECT SUM(bi) FROM t WHERE id >= 200 AND id < 205")
            self.assertEqual(cur.fetchone(), (1000 * (200 + 201 + 202 + 203 + 204),))

    def test_errors_carry_their_sqlstate(self):
        self.conn.execute("INSERT INTO t (id) VALUES (%s)", (300,))
        with self.assertRaises(errors.UniqueViolation) as e:
            self.conn.execute("INSERT INTO t (id) VALUES (%s)", (300,))
        self.assertEqual(e.exception.sqlstate, "23505")
        with self.assertRaises(errors.UndefinedTable) as e:
            self.conn.execute("SELECT * FROM no_such_table")
        self.assertEqual(e.exception.sqlstate, "42P01")
        with self.assertRaises(errors.SyntaxError) as e:
            self.conn.execute("SELEKT 1")
        self.assertEqual(e.exception.sqlstate, "42601")
        # The connection goes on.
        self.assertEqual(self.conn.execute("SELECT COUNT(*) FROM t WHERE id = 300").fetchone(), (1,))

    def test_call_runs_a_procedure_with_its_rows(self):
        self.conn.execute("CALL T.insert(%s, NULL, NULL, NULL, NULL, NULL, NULL, %s, NULL, NULL)", (400, "four hundred"))
        for binary in (True, False):
            cur = self.conn.cursor(binary=binary)
            self.assertEqual(cur.execute("CALL NameOf(%s)", (400,), prepare=True).fetchall(), [("four hundred",)])
            self.assertEqual(cur.execute("SELECT * FROM NameOf(%s)", (400,)).fetchall(), [("four hundred",)])
        with self.assertRaises(errors.UndefinedFunction):
            self.conn.execute("CALL NoSuchProcedure(%s)", (1,))

    def test_a_transaction_commits_one_change_and_refuses_a_second(self):
        with self.server.connect() as conn:  # autocommit off: psycopg sends BEGIN
            conn.execute("INSERT INTO t (id, v) VALUES (%s, %s)", (500, "committed"))
            conn.execute("SELECT COUNT(*) FROM t")  # reads are fine in the block
            conn.commit()
            conn.execute("INSERT INTO t (id) VALUES (%s)", (501,))
            with self.assertRaises(errors.FeatureNotSupported) as e:
                conn.execute("INSERT INTO t (id) VALUES (%s)", (502,))
            self.assertEqual(e.exception.sqlstate, "0A000")
            self.assertIn("one statement", str(e.exception))
            with self.assertRaises(errors.InFailedSqlTransaction):
                conn.execute("SELECT 1 FROM t")
            conn.rollback()
        rows = self.conn.execute("SELECT id, v FROM t WHERE id >= 500 AND id < 600 ORDER BY id").fetchall()
        # 501 committed when it ran (BEGIN's NOTICE says so); 502 never ran.
        self.assertEqual(rows, [(500, "committed"), (501, None)])


class TlsAndPasswordTest(unittest.TestCase):
    """A server with security on and the certificate of its other ports (--tls-cert): the
    PostgreSQL port speaks TLS, refuses clients without it, and checks passwords."""

    @classmethod
    def setUpClass(cls):
        binary = os.environ["LOCKSTEP_BIN"]
        dir = tempfile.TemporaryDirectory(prefix="lockstep-psycopg-tls-")
        cls.cert = os.path.join(dir.name, "cert.pem")
        key = os.path.join(dir.name, "key.pem")
        config = os.path.join(dir.name, "lockstep.toml")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-keyout", key, "-out", cls.cert, "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       check=True, capture_output=True)
        subprocess.run([binary, "user", "add", "admin", "--roles", "administrator", "--password-stdin",
                        "--config", config], input="s3cret pass\n", text=True, check=True, capture_output=True)
        cls.server = Server(["--security", "on", "--config", config, "--tls-cert", cls.cert, "--tls-key", key], dir)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def connect(self, **kwargs):
        return psycopg.connect(host=self.server.host, port=self.server.port, dbname="lockstep",
                               connect_timeout=CONNECT_TIMEOUT_S, **kwargs)

    def test_a_client_with_tls_and_the_password_is_served(self):
        with self.connect(user="admin", password="s3cret pass", sslmode="verify-full",
                          sslrootcert=self.cert) as conn:
            self.assertTrue(conn.pgconn.ssl_in_use)
            self.assertEqual(conn.execute("SELECT %s::INTEGER + 1", (41,)).fetchone(), (42,))

    def test_a_wrong_password_is_refused(self):
        with self.assertRaises(psycopg.OperationalError) as e:
            self.connect(user="admin", password="wrong", sslmode="require")
        self.assertIn("password authentication failed", str(e.exception).lower())

    def test_a_client_without_tls_is_refused(self):
        with self.assertRaises(psycopg.OperationalError) as e:
            self.connect(user="admin", password="s3cret pass", sslmode="disable")
        self.assertIn("TLS only", str(e.exception))

    @unittest.skipIf(shutil.which("psql") is None, "psql is not installed (postgresql-client)")
    def test_psql_connects_with_sslmode_require(self):
        dsn = (f"host={self.server.host} port={self.server.port} user=admin dbname=lockstep "
               "sslmode=require connect_timeout=10")
        out = subprocess.run(["psql", dsn, "-X", "-At", "-c", "SELECT 7", "-c", "\\conninfo"],
                             env={**os.environ, "PGPASSWORD": "s3cret pass"},
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("7\n"), out.stdout)
        self.assertIn("SSL connection (protocol: TLSv1.3", out.stdout)


class PlainPortTest(unittest.TestCase):
    """Without a certificate the port declines TLS: sslmode=prefer goes on in clear,
    sslmode=require gives up."""

    def test_tls_is_declined_without_a_certificate(self):
        server = Server()
        try:
            with server.connect(sslmode="prefer") as conn:
                self.assertFalse(conn.pgconn.ssl_in_use)
            with self.assertRaises(psycopg.OperationalError) as e:
                server.connect(sslmode="require")
            self.assertIn("does not support SSL", str(e.exception))
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
