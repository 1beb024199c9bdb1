"""A sweep's report: each job's row read as it is (``summary``), the findings (which option is best, by how
much, how sure: ``findings``, ``sweep_findings``, ``no_findings``, ``words``, ``confounds``, ``stats``), the
plot, the link into Aim, the sweep's end callbacks, and ``tcgexp-report``. Above ``tcgexp.track`` (Aim), whose
job context it reads."""
