/* cmd_exercise.c — flashlab exercise STAGE DIR: a student copy of a stage (exercise.h). */
#include "cli.h"
#include "exercise.h"

int cmd_exercise(Options *o)
{
    if (o->npositional != 2)
        return usage_error("exercise", "needs a stage and a folder, e.g. 'flashlab exercise 07 ex07'%s", "");
    FlError err = {{0}};
    int rc = exercise_write(o->positional[0], o->positional[1], &err);
    if (rc != FL_OK)
        fprintf(stderr, "flashlab exercise: %s\n", err.msg);
    return rc;
}
