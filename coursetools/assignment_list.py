"""The students' Assignment List where there is no nbgrader exchange: one line saying what the list is for.

nbgrader's Assignment List (its ``assignment_list`` server extension, nbgrader 0.9.6) fetches and submits
assignments through an exchange folder that an instructor's set-up provides (a course on JupyterHub, a shared
machine). Without one (`make lab`, Binder), every list the panel shows was nbgrader's five-line error ("The
exchange directory does not exist and could not be created. ... Please see the documentation on ..."), three
times (the panel shows the one error in each of its lists, released, downloaded and submitted, and says "Error
fetching courses!" above them: nbgrader's lab extension does both). This server extension, which the students' settings enable (jupyter/student/jupyter_server_config.json),
replaces that error by ``NO_EXCHANGE``; every other answer, an exchange's lists included, passes unchanged.

nbgrader has no setting for that message: its handlers build it. They ask the list manager that nbgrader keeps
in the server's settings (``assignment_list_manager``), so once every extension has loaded, this one wraps that
manager; the panel's requests go through nbgrader's own handlers as before.
"""

from __future__ import annotations

NO_EXCHANGE = (
    "The Assignment List fetches and submits assignments through an exchange that your instructor's set-up "
    "provides; this lab has none."
)
# The start of nbgrader 0.9.6's message for a missing exchange (nbgrader/server_extensions/assignment_list).
NBGRADER_NO_EXCHANGE = "The exchange directory does not exist"


def friendly(result: dict) -> dict:
    """``result`` (an answer of nbgrader's list manager), with the missing exchange's error said in one line."""
    if not result.get("success") and str(result.get("value", "")).lstrip().startswith(NBGRADER_NO_EXCHANGE):
        return {"success": False, "value": NO_EXCHANGE}
    return result


class FriendlyAssignmentList:
    """nbgrader's ``AssignmentList`` manager, whose lists say ``NO_EXCHANGE`` where there is no exchange."""

    def __init__(self, manager):
        self._manager = manager

    def __getattr__(self, name):
        return getattr(self._manager, name)

    def list_courses(self) -> dict:
        return friendly(self._manager.list_courses())

    def list_assignments(self, course_id=None) -> dict:
        return friendly(self._manager.list_assignments(course_id=course_id))


def _jupyter_server_extension_points():
    return [{"module": "coursetools.assignment_list"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Nothing to do yet: nbgrader's extension, loaded in alphabetical order, may come after this one."""


async def _start_jupyter_server_extension(serverapp) -> None:
    """Every extension has loaded: wrap nbgrader's list manager, where its extension is on."""
    settings = serverapp.web_app.settings
    manager = settings.get("assignment_list_manager")
    if manager is not None and not isinstance(manager, FriendlyAssignmentList):
        settings["assignment_list_manager"] = FriendlyAssignmentList(manager)
        serverapp.log.info("Assignment List: one line where there is no exchange (coursetools.assignment_list)")
