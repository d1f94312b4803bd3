"""Reference components shared by the checks (in the grader) and the adapters (beside student code).

They are written independently of the course's solutions, so a check that injects one
(notebook 05's exercise 6 puts ``RoPE`` inside the student's attention) grades a
notebook without depending on the student's earlier notebooks. Nothing here imports a
notebook module (autograder/notebooks).
"""
