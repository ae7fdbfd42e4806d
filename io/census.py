"""UCI census-income (KDD), the usual multi-task data set (MMoE): no header, a row id and 42 columns.

The two tasks: marital status `` Never married`` and income over 50K (the last column is `` 50000+.``); label
is ``[N, 2]`` in that order, the order of the columns in the file. Values keep their leading space. The instance
weight is a sampling weight, not a feature, so it is ignored, and so is the row id.
"""
from gpuemb.io.reader import ReadOptions, TextReader
from gpuemb.io.schema import Schema

NAMES = ("row_id", "age", "class_of_worker", "industry_code", "occupation_code", "education", "wage_per_hour",
         "enrolled_in_edu", "marital_status", "major_industry", "major_occupation", "race", "hispanic_origin",
         "sex", "union_member", "unemployment_reason", "employment_status", "capital_gains", "capital_losses",
         "dividends", "tax_filer_status", "previous_region", "previous_state", "household_status",
         "household_summary", "instance_weight", "migration_msa", "migration_region", "migration_within_region",
         "same_house_last_year", "migration_sunbelt", "employer_size", "family_under_18", "father_birth_country",
         "mother_birth_country", "birth_country", "citizenship", "self_employed", "veterans_questionnaire",
         "veterans_benefits", "weeks_worked", "year", "income")
LABELS = ("marital_status", "income")
POSITIVE = {"income": " 50000+.", "marital_status": " Never married"}
DENSE = ("age", "wage_per_hour", "capital_gains", "capital_losses", "dividends", "employer_size", "weeks_worked")
SPARSE = tuple(n for n in NAMES if n not in LABELS + DENSE + ("row_id", "instance_weight"))


def census_schema():
    """The census-income schema with its two label columns."""
    return Schema.from_roles(NAMES, LABELS, DENSE, SPARSE, positive=POSITIVE, header=False)


def read_census(paths, options=ReadOptions()):
    """A streaming reader of census-income files; label is ``[N, 2]`` (never married, income > 50K)."""
    return TextReader(paths, census_schema(), options)
