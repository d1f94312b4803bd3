# A JupyterHub for one class of this course on one Linux server: `make hub` (as root) runs
# `jupyterhub -f jupyter/hub/jupyterhub_config.py` with the class's environment's Python (docs/instructors.md,
# "One server: make hub"). Students and instructors log in with their Unix account and password; each one's JupyterLab
# runs as that account, in their home, from the class's environment. tests/test_hub.py runs this file as it is.
#
# What `make hub` passes in (environment variables; the defaults are for a real class):
#   COURSE_HUB_DIR          the hub's own folder: its database, cookie secret, proxy pid file and the settings
#                           below, copied from this repository at each start (/srv/transformer-course-hub)
#   COURSE_HUB_URL          where the hub listens (http://:8000, every interface; put HTTPS in front, see below)
#   COURSE_HUB_INTERNAL_PORTS  the hub's and the proxy's own ports on 127.0.0.1 ("8081,8001")
#   COURSE_HUB_STUDENTS     the Unix group of the students (course-students)
#   COURSE_HUB_INSTRUCTORS  the Unix group of the instructors (course-instructors)
#   COURSE_EXCHANGE         nbgrader's exchange folder (/usr/local/share/nbgrader/exchange, nbgrader's default)
#   COURSE_FOLDER           each instructor's course folder, in their home (transformer-course)
# The class's environment is the one whose Python runs this hub (`make hub-install` builds it, by default at
# /opt/transformer-course): the single-user servers and the proxy are started from its bin/.
import grp
import os
import pwd
import shutil
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - JupyterHub provides get_config() to its config file

HERE = Path(__file__).resolve().parent  # jupyter/hub/ in the repository
STUDENT_SETTINGS = HERE.parent / "student"  # the students' JupyterLab settings, as `make lab` and Binder use them
ENV_BIN = Path(sys.prefix) / "bin"  # the class's environment: this hub's own Python's
STATE = Path(os.environ.get("COURSE_HUB_DIR", "/srv/transformer-course-hub"))
EXCHANGE = os.environ.get("COURSE_EXCHANGE", "/usr/local/share/nbgrader/exchange")
STUDENTS = os.environ.get("COURSE_HUB_STUDENTS", "course-students")
INSTRUCTORS = os.environ.get("COURSE_HUB_INSTRUCTORS", "course-instructors")
HUB_PORT, PROXY_API_PORT = (int(p) for p in os.environ.get("COURSE_HUB_INTERNAL_PORTS", "8081,8001").split(","))


def _folder(path: Path, mode: int) -> Path:
    """``path`` made if missing (its missing parents 0755, whatever root's umask), then given ``mode``."""
    for folder in [*reversed(path.parents), path]:
        if not folder.exists():
            folder.mkdir()
            folder.chmod(0o755)
    path.chmod(mode)
    return path


# --- The hub's own files -----------------------------------------------------------------------------------------
# Root's alone (0700): the database holds the users' tokens and servers, the cookie secret signs every login.
_folder(STATE, 0o755)  # its settings/ (below) every account reads
PRIVATE = _folder(STATE / "private", 0o700)
c.JupyterHub.db_url = f"sqlite:///{PRIVATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(PRIVATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(PRIVATE / "jupyterhub-proxy.pid")

# --- Where it listens ---------------------------------------------------------------------------------------------
# The public address (the proxy's). Plain HTTP: passwords cross the network in clear unless a reverse proxy with
# HTTPS (nginx, Caddy) stands in front, or c.JupyterHub.ssl_cert/ssl_key name a certificate.
c.JupyterHub.bind_url = os.environ.get("COURSE_HUB_URL", "http://:8000")
# The hub's own API and the proxy's API stay on this machine.
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{HUB_PORT}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PROXY_API_PORT}"

# --- The proxy, without Node.js -----------------------------------------------------------------------------------
# The package index's configurable-http-proxy (pure Python, tornado) has the Node proxy's command line and REST
# API, so JupyterHub's default proxy class starts and drives it unchanged. Named by its full path: the hub's PATH
# may not hold the class's environment.
c.ConfigurableHTTPProxy.command = [str(ENV_BIN / "configurable-http-proxy")]

# --- Who may log in -----------------------------------------------------------------------------------------------
# Local Unix accounts, checked by PAM (JupyterHub's default authenticator): the students' and instructors' groups
# only. No hub admins: an admin may open anyone's server, which no one in a class needs.
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {STUDENTS, INSTRUCTORS}
c.Authenticator.admin_users = set()
c.PAMAuthenticator.admin_groups = set()
# The hub never creates accounts: the class's accounts exist before the class (useradd, or the university's).
c.LocalAuthenticator.create_system_users = False


def _members(group: str) -> set[str]:
    """The accounts in Unix group ``group``: its listed members and those whose primary group it is."""
    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return set()
    return set(entry.gr_mem) | {p.pw_name for p in pwd.getpwall() if p.pw_gid == entry.gr_gid}


# --- Each user's server -------------------------------------------------------------------------------------------
# JupyterHub's default spawner (LocalProcessSpawner): a process per user, started by the hub (root) as that user,
# in their home, so that Unix permissions keep the homes, the exchange and the instructors' course folders apart
# (docs/instructors.md, "A class on one machine"). Another student's server is closed to a student by the hub: only
# its owner's login may open it.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(ENV_BIN / "jupyterhub-singleuser")]
c.Spawner.notebook_dir = "~"
c.Spawner.default_url = "/lab"
# A server that is slow to start on a busy machine (the first start of a class, 30 servers at once) is not failed.
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180

# The students' settings (jupyter/student/: nbgrader's instructor tools off and locked, no news pop-up, terminals
# that run the class's Python) and the class's nbgrader configuration (jupyter/hub/class/: the course, the exchange,
# the course's exchange classes) for everyone; the instructors' (jupyter/hub/instructors/) before them for the
# instructors: formgrader, Create Assignment and the course list back on, and nbgrader configured from their course
# folder. Both are copied at every start into the hub's folder, where every account can read them (the repository
# may be where they cannot, such as under /root), and given through JUPYTER_CONFIG_PATH, which outranks the
# environment's own settings (nbgrader's switch-on of formgrader for everyone) and is outranked by a user's own
# ~/.jupyter: the tools' being hidden is a convenience, the Unix permissions are what keeps a class's work apart.
SETTINGS = STATE / "settings"


def _copy_readable(source: Path, target: Path) -> None:
    """``source`` (a folder) copied to ``target``, replacing it, readable (not writable) by every account."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


_folder(SETTINGS, 0o755)
_copy_readable(STUDENT_SETTINGS, SETTINGS / "students")
_copy_readable(HERE / "instructors", SETTINGS / "instructors")
# The course's grading settings, for an instructor's formgrader until their own clone of the course exists
# (jupyter/hub/instructors/nbgrader_config.py, COURSE_DEFAULTS).
shutil.copy(HERE.parents[1] / "nbgrader_config.py", SETTINGS / "instructors" / "course_nbgrader_config.py")
(SETTINGS / "instructors" / "course_nbgrader_config.py").chmod(0o644)
_copy_readable(HERE / "class", SETTINGS / "class")


def _config_path(spawner) -> str:
    """JUPYTER_CONFIG_PATH of ``spawner``'s server: the instructors' settings first for an instructor."""
    folders = [SETTINGS / "students", SETTINGS / "class"]
    if spawner.user.name in _members(INSTRUCTORS):
        folders.insert(0, SETTINGS / "instructors")
    return os.pathsep.join(map(str, folders))


# JupyterHub passes a server almost none of the hub's own environment (its API token must not leak): the
# class's environment comes first on PATH, and the exchange and the instructors' course folder are named here
# (jupyter/hub/class/ and jupyter/hub/instructors/ read them).
c.Spawner.environment = {
    "PATH": os.pathsep.join([str(ENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
    "LANG": "C.UTF-8",
    "JUPYTER_CONFIG_PATH": _config_path,
    "COURSE_EXCHANGE": EXCHANGE,
    "COURSE_FOLDER": os.environ.get("COURSE_FOLDER", "transformer-course"),
    # One torch thread per kernel: a class's kernels share the server's cores.
    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
}

# --- nbgrader's exchange --------------------------------------------------------------------------------------------
# Created as the multi-user recipe says (docs/instructors.md, step 2): everyone may write into it, the sticky bit
# keeps each one's folders theirs. The first release makes the course's folder in it, its inbound/ mode 2733.
_folder(Path(EXCHANGE), 0o1777)

# The hub stops every user's server when it stops (Ctrl-C on `make hub`); False would keep them across a restart.
c.JupyterHub.cleanup_servers = True
