# Start-up file of the students' JupyterLab terminals (jupyter_server_config.py runs `bash --rcfile` this file):
# the user's own ~/.bashrc, as in any terminal, then the course's Python first on PATH, whatever ~/.bashrc put
# before it (pyenv, `conda activate`), so that `python -m autograder check ...` runs the course's Python.
if [ -f "$HOME/.bashrc" ]; then
    . "$HOME/.bashrc"
fi
if [ -n "${COURSE_PYTHON_BIN:-}" ]; then
    PATH="$COURSE_PYTHON_BIN:$PATH"
    export PATH
fi
