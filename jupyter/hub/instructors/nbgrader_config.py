# An instructor's nbgrader on the hub (jupyter/hub/jupyterhub_config.py puts this folder on their servers'
# JUPYTER_CONFIG_PATH, before the students' settings): the course's own configuration, from their course folder
# (docs/instructors.md, step 4: ~/transformer-course, a private clone of the repository; COURSE_FOLDER names
# another). nbgrader reads it there when run from that folder; formgrader runs in the instructor's server, which
# starts in their home, so it needs this line to grade with the course's sandbox (TrustedVerdict), limits and
# feedback. nbgrader's own "one class, one grader" demo sets c.CourseDirectory.root in the same place.
import os

c = get_config()  # noqa: F821 - traitlets provides get_config() to config files

_course = os.path.join(os.path.expanduser("~"), os.environ.get("COURSE_FOLDER", "transformer-course"))
if os.path.isfile(os.path.join(_course, "nbgrader_config.py")):
    load_subconfig(os.path.join(_course, "nbgrader_config.py"))  # noqa: F821 - traitlets provides it too
