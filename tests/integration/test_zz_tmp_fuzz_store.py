from tests.integration.test_api_fuzz import *  # noqa
from tests.integration.test_api_fuzz import _aimed


def test_store_fuzz(api, keys, run_ids, schedule_ids, thread_ids) -> None:
    schema = schemathesis.openapi.from_url(f"{api.base_url}/openapi.json")
    session = requests.Session()
    failures = {}
    answers = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        if not ("/crons" in operation.path or "/store" in operation.path):
            continue
        headers = keys["tenant"] | {"Accept": "application/json"}
        for mode in list(GenerationMode):
            try:
                fuzz(operation, mode, base_url=api.base_url, session=session, headers=headers, answers=answers,
                     aim=_aimed(run_ids, schedule_ids, thread_ids))
            except Unsatisfiable:
                pass
            except Exception as exc:
                failures[f"{operation.label} ({mode.value})"] = str(exc)[:3000]
    print(answers)
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
