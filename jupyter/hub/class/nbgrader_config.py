# Every account's nbgrader on the hub, students' and instructors' (jupyter/hub/jupyterhub_config.py puts this
# folder on every server's JUPYTER_CONFIG_PATH): the course and its exchange, as the multi-user recipe's step 3
# writes them (docs/instructors.md, "A class on one machine").
import os

c = get_config()  # noqa: F821 - traitlets provides get_config() to config files

c.CourseDirectory.course_id = "transformer-from-scratch"
# The hub names its exchange (COURSE_EXCHANGE, in each server's environment); nbgrader's default otherwise.
c.Exchange.root = os.environ.get("COURSE_EXCHANGE", "/usr/local/share/nbgrader/exchange")
# Each person is their own Unix account here, so the course's exchange classes close two holes of nbgrader's own
# (autograder/exchange.py): a submission's folder only its owner and the instructors' group may open, and no
# submission made in a classmate's name is collected.
c.ExchangeFactory.submit = "autograder.exchange.PrivateSubmit"
c.ExchangeFactory.collect = "autograder.exchange.OwnerCheckedCollect"
