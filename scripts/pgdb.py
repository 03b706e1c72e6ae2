"""Find a PostgreSQL database for the demo and the tests, the same way every time.

    python scripts/pgdb.py url [--database NAME] [--create]   print the DATABASE_URL to use
    python scripts/pgdb.py exec [--database NAME] [--create] -- CMD ...
                                                   run CMD with DATABASE_URL and PG* set
    python scripts/pgdb.py status | stop | destroy     the private cluster in .pgdata/

In this order:

1. ``DATABASE_URL``, if set: used as it is (parsed with django-environ, like the settings).
2. The local PostgreSQL server, if one answers (libpq's defaults and PG* variables, then
   127.0.0.1:5432) and lets us create databases. Only the database named by ``--database``
   is used there (``pgqueue_demo`` for the demo; the tests create and drop ``pgqueue_test``).
3. Otherwise a private throwaway cluster in ``.pgdata/``, made with this machine's ``initdb``
   and ``pg_ctl``, listening on a Unix socket only (no TCP port). As root it runs as the
   unprivileged ``postgres`` (or ``nobody``) user, because PostgreSQL refuses to run as root.

``exec`` also sets PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE to the same server, so
tools and subprocesses that only read libpq's variables (psql, pg_dump, worker subprocesses)
agree with Django. Needs psycopg and django-environ (the ``example`` or ``test`` extra).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
PGDATA_DIR = ROOT / ".pgdata"
PRIVATE_USER = "pgqueue"  # the private cluster's superuser role
PRIVATE_PORT = 5432  # only names the socket file: the private cluster opens no TCP port
# A Unix socket path must fit in sockaddr_un.sun_path (108 bytes on Linux, 104 on macOS).
MAX_SOCKET_PATH = 100

INSTALL_HELP = """\
No PostgreSQL server answers, and no PostgreSQL binaries (initdb, pg_ctl) were found to start
a private one. Do one of these, then run the command again:

  * install PostgreSQL (version 14 or later; 15 or later for Django 6.1):
      Debian/Ubuntu:  sudo apt-get install postgresql
      Fedora/RHEL:    sudo dnf install postgresql-server
      macOS:          brew install postgresql@17
    The server does not need to be running: the binaries are enough.
  * or point at a server you have:
      export DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/DBNAME
"""


class Problem(Exception):
    """Something the user has to fix; the message says what."""


@dataclass
class Database:
    host: str  # a hostname, or a socket directory (starts with "/")
    port: int | None
    user: str
    password: str
    name: str
    source: str  # a sentence for humans: where this database is

    def url(self) -> str:
        """A DATABASE_URL that django-environ parses back to these values."""
        auth = quote(self.user, safe="")
        if self.password:
            auth += ":" + quote(self.password, safe="")
        port = f":{self.port}" if self.port else ""
        if self.host.startswith("/"):
            # django-environ takes a socket directory as the path before the database name.
            return f"postgres://{auth}@{port}/{quote(self.host, safe='')}/{quote(self.name)}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"postgres://{auth}@{host}{port}/{quote(self.name)}"

    def display(self) -> str:
        """The URL without the password."""
        return Database(self.host, self.port, self.user, "", self.name, self.source).url()

    def libpq_env(self) -> dict[str, str]:
        env = {"PGHOST": self.host, "PGUSER": self.user, "PGDATABASE": self.name}
        env["PGPORT"] = str(self.port or 5432)
        if self.password:
            env["PGPASSWORD"] = self.password
        return env

    def connect(self, dbname: str | None = None, timeout: int = 3) -> psycopg.Connection:
        kwargs: dict[str, object] = {"dbname": dbname or self.name, "connect_timeout": timeout}
        if self.host:
            kwargs["host"] = self.host
        if self.port:
            kwargs["port"] = self.port
        if self.user:
            kwargs["user"] = self.user
        if self.password:
            kwargs["password"] = self.password
        return psycopg.connect(autocommit=True, **kwargs)  # type: ignore[arg-type]


def log(message: str) -> None:
    print(f"[pgdb] {message}", file=sys.stderr, flush=True)


# ----- 1. DATABASE_URL -------------------------------------------------------------------------


def from_url(url: str) -> Database:
    import environ

    config = environ.Env.db_url_config(url)
    if "postgres" not in config.get("ENGINE", ""):
        raise Problem(f"DATABASE_URL must point at PostgreSQL, not {config.get('ENGINE')!r}.")
    port = config.get("PORT") or None
    return Database(
        host=str(config.get("HOST") or ""),
        port=int(port) if port else None,
        user=str(config.get("USER") or ""),
        password=str(config.get("PASSWORD") or ""),
        name=str(config.get("NAME") or ""),
        source="DATABASE_URL",
    )


# ----- 2. the local server ----------------------------------------------------------------------


def local_server(name: str) -> Database | None:
    """The local server, if one answers and lets this user create databases."""
    attempts: list[dict[str, object]] = [{}]  # libpq defaults: PGHOST/PGPORT/PGUSER or socket
    if not os.environ.get("PGHOST"):
        attempts.append({"host": "127.0.0.1", "port": 5432})
    for kwargs in attempts:
        for dbname in ("postgres", "template1"):
            try:
                conn = psycopg.connect(
                    dbname=dbname,
                    connect_timeout=3,
                    autocommit=True,
                    **kwargs,  # type: ignore[arg-type]
                )
            except psycopg.Error:
                continue
            with conn:
                info = conn.info
                row = conn.execute(
                    "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user"
                ).fetchone()
                if not (row and row[0]):
                    log(
                        f"The local server answers, but role {info.user!r} may not create "
                        "databases; using a private cluster instead."
                    )
                    return None
                host = info.host
                return Database(
                    host=host,
                    port=info.port,
                    user=info.user,
                    password=info.password or "",
                    name=name,
                    source=f"the local PostgreSQL server ({host}:{info.port})",
                )
    return None


# ----- 3. the private cluster -------------------------------------------------------------------


def find_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    patterns = [
        "/usr/lib/postgresql/*/bin",  # Debian, Ubuntu
        "/usr/pgsql-*/bin",  # PGDG RPMs
        "/opt/homebrew/opt/postgresql*/bin",  # Homebrew (Apple silicon)
        "/usr/local/opt/postgresql*/bin",  # Homebrew (Intel)
        "/usr/local/pgsql/bin",
    ]

    def version(path: Path) -> tuple[int, ...]:
        digits = "".join(c if c.isdigit() else " " for c in str(path))
        return tuple(int(d) for d in digits.split()) or (0,)

    dirs = [d for pattern in patterns for d in Path("/").glob(pattern.lstrip("/"))]
    for directory in sorted(dirs, key=version, reverse=True):
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def run_as_user() -> str | None:
    """The unprivileged account that runs the private cluster when we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise Problem(
        "Running as root, and neither a 'postgres' nor a 'nobody' user exists to run "
        "the private PostgreSQL cluster. Create one (useradd postgres) or set "
        "DATABASE_URL."
    )


def as_user(user: str | None, argv: list[str]) -> list[str]:
    if user is None:
        return argv
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--", *argv]
    return ["su", "-s", "/bin/sh", user, "-c", " ".join(_shell_quote(a) for a in argv)]


def _shell_quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _user_can_use(user: str | None, directory: Path) -> bool:
    if user is None:
        return True
    probe = as_user(user, ["test", "-x", str(directory)])
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@dataclass
class Cluster:
    base: Path
    user: str | None  # the OS user it runs as (None: us)
    port: int = PRIVATE_PORT
    listen: str = ""  # a TCP address to listen on too ("": the Unix socket only)
    settings: dict[str, str] = field(default_factory=dict)  # more postgresql.conf lines

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base / "run"

    @property
    def logfile(self) -> Path:
        return self.base / "postgresql.log"

    def database(self, name: str) -> Database:
        if self.listen:
            return Database(
                host=self.listen,
                port=self.port,
                user=PRIVATE_USER,
                password="",
                name=name,
                source=f"a private PostgreSQL cluster in {self.base} ({self.listen}:{self.port})",
            )
        return Database(
            host=str(self.socket_dir),
            port=self.port,
            user=PRIVATE_USER,
            password="",
            name=name,
            source=f"a private PostgreSQL cluster in {self.base} (socket only)",
        )

    def pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``pg_ctl -D DATA ARGS`` as the cluster's user; never raises on its exit status."""
        pg_ctl = find_binary("pg_ctl")
        if not pg_ctl:
            raise Problem(INSTALL_HELP)
        return subprocess.run(
            as_user(self.user, [pg_ctl, "-D", str(self.data), *args]),
            capture_output=True,
            text=True,
            check=False,
            cwd="/",
        )

    def running(self) -> bool:
        return self.pg_ctl("status").returncode == 0

    def log_tail(self, chars: int = 2000) -> str:
        return self.logfile.read_text(errors="replace")[-chars:] if self.logfile.exists() else ""


def private_cluster() -> Cluster:
    """Where the private cluster lives: .pgdata/ unless that cannot work here."""
    user = run_as_user()
    base = PGDATA_DIR
    socket_path = base / "run" / f".s.PGSQL.{PRIVATE_PORT}"
    relocated = None
    if len(str(socket_path)) > MAX_SOCKET_PATH:
        relocated = "the project path is too long for a Unix socket"
    elif user is not None and not _user_can_use(user, ROOT):
        relocated = f"user {user!r} cannot reach {ROOT}"
    if relocated:
        digest = hashlib.sha1(str(ROOT).encode()).hexdigest()[:10]
        base = Path("/tmp") / f"pgqueue-pgdata-{digest}"
        log(f"Using {base} for the private cluster: {relocated}.")
    return Cluster(base=base, user=user)


def init_cluster(cluster: Cluster) -> None:
    """Create the cluster's directories and data (once), owned by the user it runs as."""
    initdb = find_binary("initdb")
    if not (initdb and find_binary("pg_ctl")):
        raise Problem(INSTALL_HELP)
    run_user = cluster.user
    cluster.base.mkdir(mode=0o700, exist_ok=True)
    cluster.socket_dir.mkdir(mode=0o700, exist_ok=True)
    if run_user is not None:
        entry = pwd.getpwnam(run_user)
        for path in (cluster.base, cluster.socket_dir):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        if cluster.data.exists():
            os.chown(cluster.data, entry.pw_uid, entry.pw_gid)
    if (cluster.data / "PG_VERSION").exists():
        return
    log(
        f"Creating a private PostgreSQL cluster in {cluster.data} with {initdb}"
        + (f" (as user {run_user!r}: PostgreSQL does not run as root)" if run_user else "")
    )
    result = subprocess.run(
        as_user(
            run_user,
            [
                initdb,
                "-D",
                str(cluster.data),
                "-U",
                PRIVATE_USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
            ],
        ),
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    if result.returncode != 0:
        raise Problem(f"initdb failed:\n{result.stdout}{result.stderr}")
    lines = {
        "listen_addresses": f"'{cluster.listen}'",
        "unix_socket_directories": f"'{cluster.socket_dir}'",
        "port": str(cluster.port),
        "max_connections": "200",
        **cluster.settings,
    }
    with open(cluster.data / "postgresql.conf", "a") as conf:
        conf.write(
            "\n# Written by scripts/pgdb.py: a private cluster for the demo and the tests.\n"
        )
        conf.writelines(f"{name} = {value}\n" for name, value in lines.items())


def start_private_cluster(cluster: Cluster) -> None:
    """Create the cluster if needed and start it, unless it runs already."""
    init_cluster(cluster)
    if cluster.running():
        return
    log(f"Starting the private PostgreSQL cluster (log: {cluster.logfile})")
    result = cluster.pg_ctl("-l", str(cluster.logfile), "-w", "-t", "60", "start")
    if result.returncode != 0:
        raise Problem(
            "pg_ctl could not start the private cluster:\n"
            f"{result.stdout}{result.stderr}\n{cluster.log_tail()}"
        )


def stop_private_cluster(cluster: Cluster, mode: str = "fast") -> bool:
    """``pg_ctl stop -m MODE`` (fast: roll back and disconnect; immediate: a crash)."""
    if not (find_binary("pg_ctl") and (cluster.data / "PG_VERSION").exists()):
        return False
    return cluster.pg_ctl("-m", mode, "-w", "stop").returncode == 0


# ----- putting it together ----------------------------------------------------------------------


def ensure_database(db: Database) -> bool:
    """Create ``db.name`` if it does not exist; True if it was created."""
    try:
        with db.connect():
            return False
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc):
            raise Problem(f"Cannot connect to {db.display()}: {exc}") from None
    for maintenance in ("postgres", "template1"):
        try:
            conn = db.connect(dbname=maintenance)
        except psycopg.OperationalError:
            continue
        with conn:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db.name)))
            except psycopg.errors.DuplicateDatabase:
                return False
            except psycopg.Error as exc:
                raise Problem(f"Cannot create database {db.name!r}: {exc}") from None
        return True
    raise Problem(f"Cannot connect to {db.display()} to create database {db.name!r}.")


def resolve(name: str, create: bool) -> Database:
    url = os.environ.get("DATABASE_URL")
    if url:
        db = from_url(url)
        if create and ensure_database(db):
            log(f"Created database {db.name!r} (named by DATABASE_URL).")
        return db
    db = local_server(name)
    if db is None:
        cluster = private_cluster()
        start_private_cluster(cluster)
        db = cluster.database(name)
        deadline = time.monotonic() + 30
        while True:
            try:
                with db.connect(dbname="postgres"):
                    break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    if create and ensure_database(db):
        log(f"Created database {db.name!r} on {db.source}; nothing else there is touched.")
    return db


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("url", "exec"):
        p = sub.add_parser(command)
        p.add_argument("--database", default="pgqueue", help="database name (default: pgqueue)")
        p.add_argument("--create", action="store_true", help="create the database if missing")
        if command == "exec":
            p.add_argument("cmd", nargs=argparse.REMAINDER)
    for command in ("status", "stop", "destroy"):
        sub.add_parser(command)
    args = parser.parse_args(argv)

    try:
        if args.command in ("url", "exec"):
            db = resolve(args.database, args.create)
            if args.command == "url":
                print(db.url())
                return 0
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            if not cmd:
                parser.error("exec needs a command after --")
            env = dict(os.environ, DATABASE_URL=db.url(), **db.libpq_env())
            os.execvpe(cmd[0], cmd, env)
        cluster = private_cluster()
        if args.command == "status":
            exists = (cluster.data / "PG_VERSION").exists()
            print(f"private cluster: {cluster.base} ({'exists' if exists else 'none'})")
            return 0
        if args.command == "stop":
            print("stopped" if stop_private_cluster(cluster) else "not running")
            return 0
        if args.command == "destroy":
            stop_private_cluster(cluster)
            if cluster.base.exists():
                shutil.rmtree(cluster.base)
                print(f"removed {cluster.base}")
            return 0
    except Problem as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
