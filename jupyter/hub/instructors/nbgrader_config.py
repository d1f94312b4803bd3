# An instructor's nbgrader on the hub (jupyter/hub/jupyterhub_config.py puts this folder on their servers'
# JUPYTER_CONFIG_PATH, before the students' settings): the course's own configuration, from their course folder
# (docs/instructors.md, step 3: ~/transformer-course, a private clone of the repository; COURSE_FOLDER names
# another). nbgrader reads it there when run from that folder; formgrader runs in the instructor's server, which
# starts in their home, so it needs these lines to grade with the course's sandbox (TrustedVerdict), limits,
# feedback and gradebook. nbgrader's own "one class, one grader" demo sets c.CourseDirectory.root in the same place.
#
# The guide has the instructor clone the course from a terminal of their running server, so this file often runs
# before the folder exists. formgrader fixes its course folder and gradebook when the server starts, and reads
# this file again on each request: the course's root and gradebook are therefore named here whether or not the
# folder exists yet (formgrader's gradebook was ~/gradebook.db otherwise, a second gradebook that knew no
# assignment, until the server was restarted), and the course's own settings are loaded from the first request
# after the clone on. Until then, formgrader cannot open a gradebook in a folder that does not exist, and
# collecting or grading refuses, saying so (autograder.nbgrader_plugin.gradebook_refusal).
import os

c = get_config()  # noqa: F821 - traitlets provides get_config() to config files

_course = os.path.join(os.path.expanduser("~"), os.environ.get("COURSE_FOLDER", "transformer-course"))
c.CourseDirectory.root = _course
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(_course, "gradebook.db")
if os.path.isfile(os.path.join(_course, "nbgrader_config.py")):
    load_subconfig(os.path.join(_course, "nbgrader_config.py"))  # noqa: F821 - traitlets provides it too
