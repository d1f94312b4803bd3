# An instructor's nbgrader on the hub (jupyter/hub/jupyterhub_config.py puts this folder on their servers'
# JUPYTER_CONFIG_PATH, before the students' settings): the course's own configuration, from their course folder
# (docs/instructors.md, step 3: ~/transformer-course, a private clone of the repository; COURSE_FOLDER names
# another). nbgrader reads it there when run from that folder; formgrader runs in the instructor's server, which
# starts in their home, so it needs these lines to grade with the course's sandbox (TrustedVerdict), limits,
# feedback and gradebook. nbgrader's own "one class, one grader" demo sets c.CourseDirectory.root in the same place.
#
# The guide has the instructor clone the course from a terminal of their running server, so this file often runs
# before the folder exists. formgrader fixes its course folder and gradebook when the server starts (and shows the
# settings it started with), and reads this file again on each request: so the course's root and gradebook are named
# here whether or not the folder exists yet (formgrader's gradebook was ~/gradebook.db otherwise, a second gradebook
# that knew no assignment, until the server was restarted), and until the clone exists the course's settings come
# from the copy the hub made at its start (COURSE_DEFAULTS, the repository's nbgrader_config.py): the sandbox,
# limits and feedback are the course's from the server's first moment. From the first request after the clone on,
# the clone's own settings are read instead. Until then, formgrader cannot open a gradebook in a folder that does
# not exist, and collecting or grading into any other gradebook refuses, saying why
# (autograder.nbgrader_plugin.gradebook_refusal).
import os

c = get_config()  # noqa: F821 - traitlets provides get_config() to config files

COURSE_DEFAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "course_nbgrader_config.py")
_course = os.path.join(os.path.expanduser("~"), os.environ.get("COURSE_FOLDER", "transformer-course"))
_settings = os.path.join(_course, "nbgrader_config.py")
if os.path.isfile(_settings) or os.path.isfile(COURSE_DEFAULTS):
    load_subconfig(_settings if os.path.isfile(_settings) else COURSE_DEFAULTS)  # noqa: F821 - traitlets provides it
c.CourseDirectory.root = _course
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(_course, "gradebook.db")
