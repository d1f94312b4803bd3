"""nbgrader's exchange, with two holes closed that matter when students share one machine (a JupyterHub).

nbgrader 0.9's default exchange keeps each submission in ``inbound/STUDENT+ASSIGNMENT+TIME+RANDOM``.
Students cannot list ``inbound`` (mode 2733), but:

- the submission's folder is left open to everyone (0777, "so the instructor can delete later";
  its files 0644): whoever has its name may read, rename or replace the files; only the name's
  random part hides it. ``PrivateSubmit`` closes the folder to everyone but its owner and the
  instructor's group, which the folder inherits from ``inbound``; the instructor can still read
  and delete it.
- ``nbgrader submit --student=CLASSMATE`` submits in a classmate's name, and ``collect`` takes the
  newest submission per name: it notices that the folder belongs to someone else, says "cheating
  attempt?" in a warning, and collects it anyway, in place of the classmate's own.
  ``OwnerCheckedCollect`` leaves out every submission whose folder does not belong to the student
  it names, says so as an error, and collects that student's own newest submission.

Set both in the configuration every user's nbgrader reads (docs/instructors.md, "A class on one
machine, step by step"): ``c.ExchangeFactory.submit = "autograder.exchange.PrivateSubmit"`` and
``c.ExchangeFactory.collect = "autograder.exchange.OwnerCheckedCollect"``. They are for hubs where each
person is their own Unix account. Where every user runs as the same account (``jovyan`` in the
containers of DockerSpawner or KubeSpawner), ownership tells students apart no more than permissions
do: there ``OwnerCheckedCollect`` would leave out every submission, so the course's own
``nbgrader_config.py`` does not set them.
"""

from __future__ import annotations

import glob
import os
import pwd
from collections import defaultdict

from nbgrader.exchange.default import ExchangeCollect, ExchangeSubmit


class PrivateSubmit(ExchangeSubmit):
    """nbgrader's submit; the submission's folder is then the student's and the instructor's group's only."""

    def copy_files(self):
        super().copy_files()
        folder = os.path.join(self.inbound_path, self.assignment_filename)
        if os.stat(folder).st_gid != os.stat(self.inbound_path).st_gid:  # inbound without its set-group-id bit
            self.log.warning(
                "%s is not in the group of %s: left readable by everyone who knows its name", folder, self.inbound_path
            )
            return
        os.chmod(folder, 0o770)


def _owner(path: str) -> str:
    uid = os.stat(path).st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class OwnerCheckedCollect(ExchangeCollect):
    """nbgrader's collect, without the submissions made in someone else's name, and only into the course's own
    gradebook (``nbgrader_plugin.gradebook_refusal``): it refuses before it opens any gradebook."""

    def init_src(self):
        from autograder.nbgrader_plugin import gradebook_refusal

        if refusal := gradebook_refusal(self.coursedir.db_url, self.config):
            self.fail(refusal)
        super().init_src()  # nbgrader's checks and the due date; its choice of submissions is made again below
        student_id = self.coursedir.student_id if self.coursedir.student_id else "*"
        pattern = os.path.join(self.inbound_path, f"{student_id}+{self.coursedir.assignment_id}+*")
        by_student = defaultdict(list)
        for path in glob.glob(pattern):
            record = self._path_to_record(path)
            owner = _owner(path)
            if owner != record["username"]:
                self.log.error(
                    "Not collected: %s is named as %s's submission but belongs to %s", path, record["username"], owner
                )
                continue
            by_student[record["username"]].append(record)
        # As nbgrader chooses: the newest, or with --before-duedate the newest before the due date if any.
        self.src_records = []
        for records in by_student.values():
            records = self._sort_by_timestamp(records)
            if self.duedate is not None and self.before_duedate:
                records = [r for r in records if r["timestamp"] <= self.duedate] or records
            self.src_records.append(records[0])
