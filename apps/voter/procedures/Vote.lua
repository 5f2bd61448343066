-- Vote(phone_number, contestant_number, max_votes): records one vote.
-- Returns 0 when the vote is counted, 1 for an unknown contestant, 2 when the phone
-- number has already used its votes. Single-partition on phone_number.
local find_contestant = sql [[SELECT contestant_number FROM contestants WHERE contestant_number = ?]]
local count_votes     = sql [[SELECT num_votes FROM v_votes_by_phone_number WHERE phone_number = ?]]
local find_state      = sql [[SELECT state FROM area_code_state WHERE area_code = ?]]
local insert_vote     = sql [[INSERT INTO votes (phone_number, state, contestant_number) VALUES (?, ?, ?)]]

local VOTE_SUCCESSFUL, ERR_INVALID_CONTESTANT, ERR_VOTER_OVER_VOTE_LIMIT = 0, 1, 2

-- Single-row reads use :values(), which returns the row's columns (nothing when there is
-- no row) without building a row table: the cheapest read (crates/procs/README.md).
return function(phone_number, contestant_number, max_votes)
  if not find_contestant:values(contestant_number) then
    return ERR_INVALID_CONTESTANT
  end
  local num_votes = count_votes:values(phone_number)
  if num_votes and num_votes >= max_votes then
    return ERR_VOTER_OVER_VOTE_LIMIT
  end
  local state = find_state:values(phone_number // 10000000)
  insert_vote:exec(phone_number, state or "XX", contestant_number)
  return VOTE_SUCCESSFUL
end
