-- Vote(phone_number, contestant_number, max_votes): records one vote.
-- Returns 0 when the vote is counted, 1 for an unknown contestant, 2 when the phone
-- number has already used its votes. Single-partition on phone_number.
local find_contestant = sql [[SELECT contestant_number FROM contestants WHERE contestant_number = ?]]
local count_votes     = sql [[SELECT num_votes FROM v_votes_by_phone_number WHERE phone_number = ?]]
local find_state      = sql [[SELECT state FROM area_code_state WHERE area_code = ?]]
local insert_vote     = sql [[INSERT INTO votes (phone_number, state, contestant_number) VALUES (?, ?, ?)]]

local VOTE_SUCCESSFUL, ERR_INVALID_CONTESTANT, ERR_VOTER_OVER_VOTE_LIMIT = 0, 1, 2

return function(phone_number, contestant_number, max_votes)
  local area_code = phone_number // 10000000
  local contestant, votes, state = batch(
    find_contestant:bind(contestant_number),
    count_votes:bind(phone_number),
    find_state:bind(area_code))
  if #contestant == 0 then
    return ERR_INVALID_CONTESTANT
  end
  if #votes > 0 and votes[1].num_votes >= max_votes then
    return ERR_VOTER_OVER_VOTE_LIMIT
  end
  local st = "XX"
  if #state > 0 then st = state[1].state end
  insert_vote:exec(phone_number, st, contestant_number)
  return VOTE_SUCCESSFUL
end
