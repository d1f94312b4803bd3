# The students' terminals run the course's Python: `python -m autograder check NN_name`, as every notebook prints
# it, works as typed in JupyterLab's terminal (File > New > Terminal), which opens in the lab's root: the course's
# top folder (make lab, Binder) or the student's home (the hub), where autograder/notebook_path.py finds the copy.
#
# Three things stood in the way. The server may be started without the course environment's bin/ on PATH (a
# `jupyter lab` run by its full path; Binder's start-up). jupyter_server_terminals starts a LOGIN shell
# (`$SHELL -l`) whenever the server's stdout is not a terminal and no shell_command is set (`make lab` in the
# background, Binder, a JupyterHub spawner): a login shell reads /etc/profile, which on Debian and Ubuntu sets
# PATH afresh (macOS's /etc/zprofile puts the system's folders first), so `python` was the system's, without
# nbformat or torch, or no command at all. And the user's ~/.bashrc may put another Python first (pyenv,
# `conda activate`).
#
# So: the folder of the Python that runs this server (the course environment's bin/) goes first on the server's
# PATH, which its terminals inherit, and terminals run bash, not as a login shell, with terminal.bashrc (beside
# this file) as its start-up file: it runs the user's ~/.bashrc, then puts that folder first again. Without
# bash, $SHELL (or sh) runs, not as a login shell.
#
# `make lab` reads this file from jupyter/student/ (JUPYTER_CONFIG_PATH); tools/student_settings.py installs it,
# and terminal.bashrc beside it, into Binder's environment. Jupyter reads it beside jupyter_server_config.json.
import os
import shutil
import sys

_bin = os.path.dirname(sys.executable)
_path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != _bin]
os.environ["PATH"] = os.pathsep.join([_bin, *_path])
os.environ["COURSE_PYTHON_BIN"] = _bin  # terminal.bashrc puts it first again, after ~/.bashrc

_bash = shutil.which("bash")
_rc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "terminal.bashrc")
if _bash and os.path.isfile(_rc):
    _shell = [_bash, "--rcfile", _rc]
else:
    _shell = [os.environ.get("SHELL") or shutil.which("sh") or "/bin/sh"]

c = get_config()  # noqa: F821 - traitlets provides get_config() to config files
c.ServerApp.terminado_settings.update({"shell_command": _shell})
